// The code interpreter (port 49999) through E2B's stock JS SDK
// (npm @e2b/code-interpreter), unchanged: only E2B_API_URL, E2B_SANDBOX_URL
// and E2B_API_KEY are set (by e2bsdk_test.go). The service's policy has a
// 10 s cell timeout.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, TimeoutError, NotFoundError, SandboxError } from '@e2b/code-interpreter'

// withSandbox runs fn on a new sandbox and kills it whatever happens.
async function withSandbox(fn) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await fn(sbx)
  } finally {
    await sbx.kill()
  }
}

test('state across cells, the last value, streams and the execution count', async () => {
  await withSandbox(async (sbx) => {
    const first = await sbx.runCode('x = 1')
    assert.equal(first.error, undefined)
    assert.equal(first.text, undefined, 'an assignment has no value')
    const second = await sbx.runCode('x + 1')
    assert.equal(second.text, '2')
    assert.equal(second.results.length, 1)
    assert.equal(second.results[0].isMainResult, true)
    assert.ok(second.executionCount > first.executionCount, `${second.executionCount} after ${first.executionCount}`)
    assert.equal((await sbx.runCode("'hello ' + 'world'")).text, 'hello world', "a string's text comes without its quotes")

    const out = []
    const err = []
    const seen = []
    const streamed = await sbx.runCode('import sys, time\nprint("one", flush=True)\ntime.sleep(1)\nprint("two")\nprint("oops", file=sys.stderr)', {
      onStdout: (m) => { out.push(m.line); seen.push(Date.now()) },
      onStderr: (m) => err.push(m.line),
    })
    assert.equal(out.join(''), 'one\ntwo\n')
    assert.equal(err.join(''), 'oops\n')
    assert.equal(streamed.logs.stdout.join(''), 'one\ntwo\n')
    assert.equal(streamed.logs.stderr.join(''), 'oops\n')
    assert.ok(seen.length >= 2 && seen[seen.length - 1] - seen[0] >= 500, `stdout came as the cell wrote it, not at its end: ${seen}`)

    const indented = await sbx.runCode('    y = 5\n    y * 2')
    assert.equal(indented.error, undefined, JSON.stringify(indented.error))
    assert.equal(indented.text, '10')
  })
})

test('an exception gives execution.error with name, value and traceback', async () => {
  await withSandbox(async (sbx) => {
    const e = await sbx.runCode('def f():\n    return 1 / 0\nf()')
    assert.equal(e.error.name, 'ZeroDivisionError')
    assert.equal(e.error.value, 'division by zero')
    assert.match(e.error.traceback, /ZeroDivisionError/)
    assert.match(e.error.traceback, /return 1 \/ 0/)
    assert.equal(e.results.length, 0)
    assert.equal((await sbx.runCode('2 * 21')).text, '42', 'the sandbox goes on after an error')
  })
})

test('a matplotlib figure gives a PNG and its chart; a DataFrame its HTML and text', async () => {
  await withSandbox(async (sbx) => {
    const fig = await sbx.runCode(
      "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9], label='squares')\nplt.title('Squares')\nplt.xlabel('n')\nplt.show()")
    assert.equal(fig.error, undefined, JSON.stringify(fig.error))
    const shown = fig.results.filter((r) => r.png)
    assert.equal(shown.length, 1, JSON.stringify(fig.results.map((r) => r.formats())))
    const png = Buffer.from(shown[0].png, 'base64')
    assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47], 'base64 of a PNG')
    assert.equal(shown[0].isMainResult, false)
    const chart = shown[0].chart
    assert.equal(chart.type, 'line')
    assert.equal(chart.title, 'Squares')
    assert.equal(chart.x_label, 'n')
    assert.equal(chart.elements.length, 1)
    assert.equal(chart.elements[0].label, 'squares')
    assert.deepEqual(chart.elements[0].points, [[1, 1], [2, 4], [3, 9]])

    const df = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    assert.equal(df.error, undefined, JSON.stringify(df.error))
    const main = df.results.find((r) => r.isMainResult)
    assert.match(main.html, /<table/)
    assert.match(main.text, /a\s+b/)
    assert.ok(main.formats().includes('html'))
  })
})

test('envs apply to one execution only', async () => {
  await withSandbox(async (sbx) => {
    const code = 'import os\nstr(os.environ.get("JC_ONE_CELL"))'
    assert.equal((await sbx.runCode(code, { envs: { JC_ONE_CELL: 'v1' } })).text, 'v1')
    assert.equal((await sbx.runCode(code)).text, 'None')
  })
})

test('a cell over its timeout makes runCode throw; the sandbox keeps its variables', async () => {
  await withSandbox(async (sbx) => {
    await sbx.runCode('import time\nkept = 7')
    // The SDK's own timeoutMs: it gives up and the door interrupts the cell.
    await assert.rejects(sbx.runCode('time.sleep(30)', { timeoutMs: 2_000 }), TimeoutError)
    assert.equal((await sbx.runCode('kept')).text, '7')
    // jailcell's own limit (the policy's 10 s) ends the cell first.
    const t0 = Date.now()
    const over = await sbx.runCode('time.sleep(30)', { timeoutMs: 60_000 })
    assert.ok(Date.now() - t0 < 25_000, 'the policy ended the cell')
    assert.equal(over.error.name, 'TimeoutError')
    assert.match(over.error.value, /timeout/)
    assert.equal((await sbx.runCode('kept + 1')).text, '8')
  })
})

test('a language other than python is refused with a clear error', async () => {
  await withSandbox(async (sbx) => {
    await assert.rejects(sbx.runCode('console.log(1)', { language: 'js' }), (e) => e instanceof SandboxError && /400/.test(e.message))
    await assert.rejects(sbx.createCodeContext({ language: 'r' }), (e) => e instanceof SandboxError && /400/.test(e.message))
    // What the door answers, read without the SDK, which drops the body.
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/execute`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': sbx.envdAccessToken },
      body: JSON.stringify({ code: '1', language: 'javascript' }),
    })
    assert.equal(res.status, 400)
    assert.match((await res.json()).message, /runs only python/)
    assert.equal((await sbx.runCode('1 + 1', { language: 'python' })).text, '2')
  })
})

test('contexts: create, run with their own variables and cwd, list, restart, remove', async () => {
  await withSandbox(async (sbx) => {
    await sbx.runCode("import os\nos.makedirs('/work/sub', exist_ok=True)\nx = 'main'")
    const ctx = await sbx.createCodeContext({ cwd: '/work/sub' })
    assert.equal(ctx.language, 'python')
    assert.equal(ctx.cwd, '/work/sub')
    assert.equal((await sbx.runCode("x = 'ctx'", { context: ctx })).error, undefined)
    assert.equal((await sbx.runCode('x', { context: ctx })).text, 'ctx')
    assert.equal((await sbx.runCode('x')).text, 'main', "the default context's own x")
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, '/work/sub')
    assert.equal((await sbx.runCode('import os\nos.getcwd()')).text, '/home/user', "the default context starts in E2B's home")

    const listed = await sbx.listCodeContexts()
    assert.deepEqual(listed.map((c) => c.id).sort(), ['default', ctx.id].sort())
    assert.equal(listed.find((c) => c.id === 'default').cwd, '/home/user')
    assert.equal((await sbx.runCode('x', { context: listed.find((c) => c.id === 'default') })).text, 'main')

    await sbx.restartCodeContext(ctx)
    const gone = await sbx.runCode('x', { context: ctx })
    assert.equal(gone.error.name, 'NameError', 'a restarted context starts empty')
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, '/work/sub')
    assert.equal((await sbx.runCode('x')).text, 'main')

    await sbx.removeCodeContext(ctx)
    assert.deepEqual((await sbx.listCodeContexts()).map((c) => c.id), ['default'])
    await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError)
    await assert.rejects(sbx.removeCodeContext(ctx), NotFoundError)
    await assert.rejects(sbx.createCodeContext({ cwd: '/work/missing' }), (e) => e instanceof SandboxError && /400/.test(e.message), 'a cwd that is not there')
  })
})

test('a sandbox holds at most 16 contexts besides its default one', async () => {
  await withSandbox(async (sbx) => {
    const made = []
    for (let i = 0; i < 16; i++) made.push(await sbx.createCodeContext())
    await assert.rejects(sbx.createCodeContext(), (e) => e instanceof SandboxError && /429/.test(e.message))
    await sbx.removeCodeContext(made[0])
    const again = await sbx.createCodeContext()
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: again })).text, '/home/user')
  })
})

// E2B programs start a background command (a server, a watcher) and run
// cells beside it: the command's output is polled on the same session, so
// the cells must queue behind the polls, never fail "busy".
test('cells run while a background command streams its output', async () => {
  await withSandbox(async (sbx) => {
    const lines = []
    const h = await sbx.commands.run('for i in $(seq 1 30); do echo tick $i; sleep 0.05; done', {
      background: true, onStdout: (l) => lines.push(l),
    })
    await sbx.runCode('n = 0')
    for (let i = 0; i < 10; i++) {
      const e = await sbx.runCode('n += 1\nn')
      assert.equal(e.error, undefined, JSON.stringify(e.error))
    }
    assert.equal((await sbx.runCode('n')).text, '10')
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(lines.join('').split('\n').filter(Boolean).length, 30, lines.join(''))
  })
})

test('killing the sandbox while a cell runs raises TimeoutError, at once', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  let printed
  const running = new Promise((resolve) => { printed = resolve })
  const cell = sbx.runCode('import time\nprint("started", flush=True)\ntime.sleep(8)\n"finished"', { onStdout: () => printed() })
  cell.catch(() => {})
  await running
  const t0 = Date.now()
  assert.equal(await sbx.kill(), true)
  await assert.rejects(cell, (err) => {
    assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message}`)
    assert.match(err.message, /killed/)
    return true
  })
  assert.ok(Date.now() - t0 < 5_000, `the cell's stream ended ${Date.now() - t0} ms after the kill`)
})
