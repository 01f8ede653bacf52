// envd's process service through E2B's stock JS SDK (npm e2b), unchanged:
// sbx.commands over jailcell's command op. Only E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY are set (by e2bsdk_test.go).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, InvalidArgumentError, TimeoutError } from 'e2b'

// withSandbox runs fn with a fresh sandbox and kills it however fn ends.
async function withSandbox(fn) {
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  try {
    await fn(sbx)
  } finally {
    await sbx.kill()
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

test('run in the foreground: stdout, stderr, exit code', async () => {
  await withSandbox(async (sbx) => {
    const r = await sbx.commands.run('echo out; echo err >&2')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out\n')
    assert.equal(r.stderr, 'err\n')
    assert.equal(r.error, undefined)
    const bin = await sbx.commands.run("printf 'a\\377b\\n'")
    assert.equal(bin.stdout, 'a\uFFFDb\n', 'bytes that are not UTF-8 arrive as U+FFFD')
  })
})

test('a nonzero exit raises CommandExitError with the exit code and stderr', async () => {
  await withSandbox(async (sbx) => {
    await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, `${err}`)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stdout, 'partial\n')
      assert.equal(err.stderr, 'bad\n')
      assert.equal(err.error, 'exit status 3')
      return true
    })
  })
})

test('envs, cwd and the one user', async () => {
  await withSandbox(async (sbx) => {
    await sbx.commands.run('mkdir -p sub/dir')
    const r = await sbx.commands.run('echo "$FOO-$BAR"; pwd', { envs: { FOO: 'foo', BAR: 'b a r' }, cwd: '/work/sub/dir' })
    assert.equal(r.stdout, 'foo-b a r\n/work/sub/dir\n')
    const rel = await sbx.commands.run('pwd', { cwd: 'sub' })
    assert.equal(rel.stdout, '/home/user/sub\n', 'relative to the home')
    assert.equal((await sbx.commands.run('pwd')).stdout, '/home/user\n', "no cwd is E2B's home")
    assert.equal((await sbx.commands.run('/bin/pwd; ls /work/sub', { cwd: '/home/user/sub' })).stdout, '/home/user/sub\ndir\n', 'the home is the workspace')
    for (const user of ['root', 'user']) {
      assert.equal((await sbx.commands.run('echo hi', { user })).stdout, 'hi\n', user)
    }
    await assert.rejects(sbx.commands.run('pwd', { cwd: '/etc' }), (err) => {
      assert.ok(err instanceof InvalidArgumentError, `${err}`)
      assert.match(err.message, /\/work/)
      return true
    })
  })
})

test('onStdout and onStderr stream while the command runs', async () => {
  await withSandbox(async (sbx) => {
    const out = []
    const errs = []
    let first
    const r = await sbx.commands.run('for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.4; done', {
      onStdout: (d) => { first ??= Date.now(); out.push(d) },
      onStderr: (d) => errs.push(d),
    })
    const ended = Date.now()
    assert.equal(out.join(''), 'o1\no2\no3\n')
    assert.equal(errs.join(''), 'e1\ne2\ne3\n')
    assert.equal(r.stdout, 'o1\no2\no3\n')
    assert.ok(out.length >= 2, `stdout came in ${out.length} chunk(s): ${JSON.stringify(out)}`)
    assert.ok(ended - first >= 500, `the first output came ${ended - first} ms before the end`)
  })
})

test('background run returns a handle; wait() reads the same stream', async () => {
  await withSandbox(async (sbx) => {
    const h = await sbx.commands.run('sleep 0.5; echo done', { background: true })
    assert.ok(h.pid > 0, `pid ${h.pid}`)
    assert.equal(h.exitCode, undefined, 'still running')
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'done\n')
    assert.equal(h.stdout, 'done\n')
  })
})

test('two background commands stream at once', async () => {
  await withSandbox(async (sbx) => {
    const a = await sbx.commands.run('for i in 1 2 3; do echo a$i; sleep 0.2; done', { background: true })
    const b = await sbx.commands.run('for i in 1 2 3; do echo b$i >&2; sleep 0.3; done; exit 4', { background: true })
    const [ra, rb] = await Promise.allSettled([a.wait(), b.wait()])
    assert.equal(ra.status, 'fulfilled')
    assert.equal(ra.value.stdout, 'a1\na2\na3\n')
    assert.equal(rb.status, 'rejected')
    assert.ok(rb.reason instanceof CommandExitError)
    assert.equal(rb.reason.exitCode, 4)
    assert.equal(rb.reason.stderr, 'b1\nb2\nb3\n')
  })
})

test('kill a background command: handle.kill() and commands.kill(pid)', async () => {
  await withSandbox(async (sbx) => {
    const h = await sbx.commands.run('echo started; sleep 60', { background: true })
    await sleep(300)
    assert.equal(await h.kill(), true)
    await assert.rejects(h.wait(), (err) => {
      assert.ok(err instanceof CommandExitError, `${err}`)
      assert.equal(err.exitCode, -1)
      assert.equal(err.error, 'signal: killed')
      assert.equal(err.stdout, 'started\n')
      return true
    })
    const g = await sbx.commands.run('sleep 60', { background: true })
    assert.equal(await sbx.commands.kill(g.pid), true)
    await assert.rejects(g.wait(), CommandExitError)
    assert.equal(await sbx.commands.kill(g.pid), false, 'a killed command is not found again')
    assert.equal(await sbx.commands.kill(999999), false, 'an unknown pid is not found')
  })
})

test('commands.list() shows a running background command', async () => {
  await withSandbox(async (sbx) => {
    assert.deepEqual(await sbx.commands.list(), [])
    const h = await sbx.commands.run('sleep 60', { background: true, envs: { K: 'v' }, cwd: '/work' })
    const list = await sbx.commands.list()
    assert.equal(list.length, 1, JSON.stringify(list))
    assert.equal(list[0].pid, h.pid)
    assert.equal(list[0].cmd, '/bin/bash')
    assert.deepEqual(list[0].args, ['-l', '-c', 'sleep 60'])
    assert.deepEqual(list[0].envs, { K: 'v' })
    assert.equal(list[0].cwd, '/work')
    await h.kill()
    await assert.rejects(h.wait(), CommandExitError)
    assert.deepEqual(await sbx.commands.list(), [])
    // A command no stream follows is asked about: once ended, it is not listed.
    const q = await sbx.commands.run('sleep 0.3', { background: true })
    await q.disconnect()
    await sleep(800)
    assert.deepEqual(await sbx.commands.list(), [])
  })
})

test('commands.connect(pid) attaches to a running command, then wait()', async () => {
  await withSandbox(async (sbx) => {
    const h = await sbx.commands.run('sleep 1; echo later; exit 2', { background: true })
    await h.disconnect()
    const c = await sbx.commands.connect(h.pid)
    assert.equal(c.pid, h.pid)
    await assert.rejects(c.wait(), (err) => {
      assert.ok(err instanceof CommandExitError, `${err}`)
      assert.equal(err.exitCode, 2)
      assert.equal(err.stdout, 'later\n')
      return true
    })
    // What a command writes while no client follows waits for the next stream.
    const q = await sbx.commands.run('sleep 0.5; echo early; sleep 1.5; echo late', { background: true })
    await q.disconnect()
    await sleep(1000)
    const qc = await sbx.commands.connect(q.pid)
    assert.equal((await qc.wait()).stdout, 'early\nlate\n')
    // An ended command is remembered: connect gets its end at once.
    await assert.rejects((await sbx.commands.connect(h.pid)).wait(), (err) => err.exitCode === 2)
  })
})

test('a command past its timeoutMs raises TimeoutError and is stopped', async () => {
  await withSandbox(async (sbx) => {
    const t0 = Date.now()
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }), (err) => {
      assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message}`)
      return true
    })
    assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`)
    let list
    for (let i = 0; i < 40; i++) {
      list = await sbx.commands.list()
      if (list.length === 0) break
      await sleep(250)
    }
    assert.deepEqual(list, [], 'the timed-out command was stopped')
  })
})

test('commands share the sandbox: a file one writes, another reads', async () => {
  await withSandbox(async (sbx) => {
    await sbx.commands.run('echo hello > shared.txt && mkdir -p d && echo there > d/x')
    const r = await sbx.commands.run('cat shared.txt d/x')
    assert.equal(r.stdout, 'hello\nthere\n')
  })
})

// waitFor polls cond every 50 ms for up to 20 s.
async function waitFor(cond, what) {
  for (let i = 0; i < 400; i++) {
    if (cond()) return
    await sleep(50)
  }
  assert.fail(`timed out waiting for ${what}`)
}

test('stdin: sendStdin by handle and by pid, text and bytes, then closeStdin ends cat', async () => {
  await withSandbox(async (sbx) => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true })
    await h.sendStdin('Hello, ')
    await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('World!\n'))
    await sbx.commands.sendStdin(h.pid, '')
    await waitFor(() => h.stdout === 'Hello, World!\n', 'cat to echo the input')
    await h.closeStdin()
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'Hello, World!\n')

    // A command started without stdin reads nothing, and says so.
    const n = await sbx.commands.run('sleep 60', { background: true })
    try {
      await assert.rejects(n.sendStdin('x'), (err) => {
        assert.ok(err instanceof InvalidArgumentError, err.constructor.name)
        assert.match(err.message, /without stdin/)
        return true
      })
    } finally {
      await n.kill()
    }
  })
})

test('pty: create with envs, sendInput, resize, onData, exit code; kill', async () => {
  await withSandbox(async (sbx) => {
    let out = ''
    const dec = new TextDecoder()
    const term = await sbx.pty.create({ cols: 80, rows: 24, envs: { ABC: '123' }, onData: (d) => { out += dec.decode(d) } })
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo A$ABC; stty size; tty\n'))
    // tty prints last; waiting for its line keeps the asserts off a partial read.
    await waitFor(() => /\/dev\/pts\/\d+/.test(out), 'tty to print its /dev/pts name')
    assert.match(out, /A123/)
    assert.match(out, /24 80/)
    await sbx.pty.resize(term.pid, { cols: 120, rows: 40 })
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; exit 3\n'))
    const r = await term.wait().catch((e) => e.result ?? e)
    assert.equal(r.exitCode, 3)
    assert.match(out, /40 120/)

    const other = await sbx.pty.create({ cols: 20, rows: 5, onData: () => {} })
    assert.equal(await sbx.pty.kill(other.pid), true)
    await assert.rejects(other.wait())
  })
})

test('a start past what the sandbox can run is refused, and the sandbox goes on', async () => {
  await withSandbox(async (sbx) => {
    const handles = []
    let refused
    for (let i = 0; i < 17 && !refused; i++) {
      try {
        handles.push(await sbx.commands.run('sleep 60', { background: true }))
      } catch (err) {
        refused = err
      }
    }
    // The kernel runs at most 16; the test policy's 64 pids (the kernel
    // reads each command with two threads) may run out first.
    assert.ok(refused, `${handles.length} commands started, none refused`)
    assert.match(refused.message, /16 commands are running, at most 16|Resource temporarily unavailable/)
    assert.equal((await sbx.commands.list()).length, handles.length)
    for (const h of handles) await h.kill()
    const h = await sbx.commands.run('echo room', { background: true })
    assert.equal((await h.wait()).stdout, 'room\n')
  })
})

test('an open stream keeps the sandbox from its idle timeout', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 3_000 })
  try {
    const r = await sbx.commands.run('sleep 6; echo still here')
    assert.equal(r.stdout, 'still here\n')
    assert.equal(await sbx.isRunning(), true)
  } finally {
    await sbx.kill()
  }
})

test('killing the sandbox ends its open command streams with TimeoutError, at once', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  let ticked
  const ticking = new Promise((resolve) => { ticked = resolve })
  // Start's stream (a foreground run), and a background one followed by
  // Connect's.
  const fg = sbx.commands.run('while true; do echo tick; sleep 0.1; done', { timeoutMs: 0, onStdout: () => ticked() })
  fg.catch(() => {})
  const bg = await sbx.commands.run('sleep 60', { background: true, timeoutMs: 0 })
  await bg.disconnect()
  const conn = await sbx.commands.connect(bg.pid, { timeoutMs: 0 })
  await ticking
  const t0 = Date.now()
  assert.equal(await sbx.kill(), true)
  const raisesKilled = (err) => {
    assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message}`)
    // The door's kill or its pump, whichever sees it first, says why.
    assert.match(err.message, /the sandbox was killed or reached its end of life: sandbox \S+ (was killed|is not running: .* was closed)/)
    return true
  }
  await assert.rejects(fg, raisesKilled)
  await assert.rejects(conn.wait(), raisesKilled)
  assert.ok(Date.now() - t0 < 5_000, `the streams ended ${Date.now() - t0} ms after the kill`)
})
