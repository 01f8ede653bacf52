// The control plane through E2B's stock JS SDK (npm e2b), unchanged: only
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY are set (by e2bsdk_test.go).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, AuthenticationError, SandboxError, SandboxNotFoundError } from 'e2b'

test('create, info, isRunning, kill', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'lifecycle', n: '1' }, timeoutMs: 120_000 })
  try {
    assert.match(sbx.sandboxId, /^[a-z0-9]+-[0-9a-f]+$/)
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.deepEqual(info.metadata, { suite: 'lifecycle', n: '1' })
    assert.equal(info.state, 'running')
    assert.ok(info.endAt > info.startedAt, `endAt ${info.endAt} after startedAt ${info.startedAt}`)
    assert.ok(info.memoryMB > 0 && info.cpuCount >= 1, JSON.stringify(info))
    assert.equal(await sbx.isRunning(), true)
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill finds nothing')
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
})

test('setTimeout moves the end; connect only extends it', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  try {
    await sbx.setTimeout(200_000)
    const end = (await sbx.getInfo()).endAt.getTime()
    assert.ok(end > Date.now() + 150_000, `endAt ${new Date(end)}`)
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 30_000 })
    assert.equal(again.sandboxId, sbx.sandboxId)
    const after = (await sbx.getInfo()).endAt.getTime()
    assert.ok(after >= end - 1000, `connect with a shorter timeout moved the end from ${new Date(end)} to ${new Date(after)}`)
  } finally {
    await sbx.kill()
  }
})

test('list filters by metadata and state', async () => {
  const tag = `t${process.pid}`
  const a = await Sandbox.create({ metadata: { tag, role: 'a', note: 'a b&c=d ü%' } })
  const b = await Sandbox.create({ metadata: { tag, role: 'b' } })
  try {
    const byNote = await Sandbox.list({ query: { metadata: { tag, note: 'a b&c=d ü%' } } }).nextItems()
    assert.deepEqual(byNote.map((s) => s.sandboxId), [a.sandboxId], 'a value with a space, & = and a non-ASCII letter')
    const page = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
    assert.deepEqual(page.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())
    const onlyA = await Sandbox.list({ query: { metadata: { tag, role: 'a' } } }).nextItems()
    assert.deepEqual(onlyA.map((s) => s.sandboxId), [a.sandboxId])
    assert.equal(onlyA[0].state, 'running')
    const paused = await Sandbox.list({ query: { metadata: { tag }, state: ['paused'] } }).nextItems()
    assert.deepEqual(paused, [])
  } finally {
    await a.kill()
    await b.kill()
  }
})

test('list pages newest first, and past the sandbox a page ended on once it is killed', async () => {
  const tag = `p${process.pid}`
  const made = []
  for (let i = 0; i < 3; i++) made.push(await Sandbox.create({ metadata: { tag } }))
  try {
    const pages = Sandbox.list({ query: { metadata: { tag } }, limit: 1 })
    const first = await pages.nextItems()
    assert.deepEqual(first.map((s) => s.sandboxId), [made[2].sandboxId], 'the newest first')
    assert.equal(pages.hasNext, true)
    await made[2].kill()
    const seen = [...first]
    while (pages.hasNext) seen.push(...(await pages.nextItems()))
    assert.deepEqual(seen.map((s) => s.sandboxId), [made[2], made[1], made[0]].map((s) => s.sandboxId))
  } finally {
    for (const s of made) await s.kill()
  }
})

test('pause and connect resume the sandbox', async () => {
  const sbx = await Sandbox.create()
  try {
    assert.equal(await sbx.isRunning(), true)
    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    assert.equal(await sbx.isRunning(), false, 'a paused sandbox is not running')
    assert.equal((await sbx.getInfo()).state, 'paused', 'isRunning does not resume it')
    assert.equal(await sbx.pause(), false, 'pausing a paused sandbox answers false')
    await sbx.connect()
    assert.equal((await sbx.getInfo()).state, 'running')
    assert.equal(await sbx.isRunning(), true, 'running again after connect')
  } finally {
    await sbx.kill()
  }
})

// waitPaused polls getInfo until the sandbox is paused.
async function waitPaused (sbx, ms) {
  const end = Date.now() + ms
  for (;;) {
    const info = await sbx.getInfo()
    if (info.state === 'paused') return info
    if (Date.now() > end) assert.fail(`not paused within ${ms} ms: ${JSON.stringify(info)}`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}

test('onTimeout pause: the timeout pauses the sandbox with its processes; connect resumes it', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: false } })
  try {
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
    const bg = await sbx.commands.run('sleep 600', { background: true })
    // An open stream keeps a sandbox from its timeout: let go of it.
    await bg.disconnect()
    await sbx.files.write('kept.txt', 'kept')
    await waitPaused(sbx, 30_000)
    assert.equal(await sbx.isRunning(), false, 'paused, without autoResume: not running')
    await sbx.connect()
    assert.equal((await sbx.getInfo()).state, 'running')
    assert.equal(await sbx.isRunning(), true)
    assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid), 'the background command lives on')
    assert.equal(await sbx.files.read('kept.txt'), 'kept')
  } finally {
    await sbx.kill()
  }
})

test('autoResume: traffic to a paused sandbox resumes it', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  try {
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
    await waitPaused(sbx, 30_000)
    assert.equal(await sbx.isRunning(), true, 'the health check resumes it')
    assert.equal((await sbx.getInfo()).state, 'running')
  } finally {
    await sbx.kill()
  }
})

test('a pause without memory is refused; onTimeout kill ends the sandbox', async () => {
  await assert.rejects(Sandbox.create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }), (err) => {
    assert.ok(err instanceof SandboxError && err.statusCode === 400, `${err?.name}: ${err?.message}`)
    assert.match(err.message, /autoPauseMemory: false/)
    return true
  })
  const sbx = await Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'kill' } })
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'kill', autoResume: false })
  const end = Date.now() + 30_000
  while (await sbx.isRunning()) {
    assert.ok(Date.now() < end, 'still running 30 s past its 2 s timeout')
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
})

test('fork makes running copies', async () => {
  const sbx = await Sandbox.create({ metadata: { forked: 'yes' } })
  try {
    const kids = await sbx.fork({ count: 2 })
    assert.equal(kids.length, 2)
    for (const k of kids) {
      assert.ok(!(k instanceof Error), String(k))
      assert.notEqual(k.sandboxId, sbx.sandboxId)
      assert.deepEqual((await k.getInfo()).metadata, { forked: 'yes' })
      await k.kill()
    }
  } finally {
    await sbx.kill()
  }
})

test('metrics', async () => {
  const sbx = await Sandbox.create()
  try {
    const m = await sbx.getMetrics()
    assert.ok(m.length >= 1)
    assert.ok(m[0].memTotal > 0 && m[0].diskTotal > 0 && m[0].cpuCount >= 1, JSON.stringify(m[0]))
    // jailcell keeps no history: a range that reaches now has the sample,
    // one wholly before the sandbox none.
    const now = Date.now()
    assert.equal((await sbx.getMetrics({ start: new Date(now - 60_000), end: new Date(now) })).length, 1)
    assert.equal((await sbx.getMetrics({ start: new Date(now - 3_600_000), end: new Date(now - 1_800_000) })).length, 0)
  } finally {
    await sbx.kill()
  }
})

test('a wrong API key is an AuthenticationError', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'not-a-key-of-this-node-000000000000' }), AuthenticationError)
})

test('an unknown template is refused with the names there are', async () => {
  await assert.rejects(Sandbox.create('no-such-template'), (err) => {
    assert.match(err.message, /no-such-template.*base, code-interpreter-v1/)
    return true
  })
})

test('a sandbox refuses another sandbox\'s access token', async () => {
  const a = await Sandbox.create()
  const b = await Sandbox.create()
  try {
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, {
      headers: { 'E2b-Sandbox-Id': a.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': b.envdAccessToken },
    })
    assert.equal(res.status, 401)
    const ok = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, {
      headers: { 'E2b-Sandbox-Id': a.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': a.envdAccessToken },
    })
    assert.equal(ok.status, 204)
  } finally {
    await a.kill()
    await b.kill()
  }
})
