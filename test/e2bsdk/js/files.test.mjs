// envd's filesystem service and /files through E2B's stock JS SDK (npm e2b),
// unchanged: only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY are set (by
// e2bsdk_test.go). The SDK's home, /home/user, is the sandbox's workspace
// /work (docs/e2b.md, "Filesystem service and /files").
import { test } from 'node:test'
import assert from 'node:assert/strict'
import {
  Sandbox, FileType, FilesystemEventType, NotFoundError, FileNotFoundError,
  InvalidArgumentError, SandboxError,
} from 'e2b'

// waitFor polls cond until it holds or ms pass.
async function waitFor (cond, ms, what) {
  const end = Date.now() + ms
  while (!cond()) {
    if (Date.now() > end) assert.fail(`not within ${ms} ms: ${what()}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

test('write then read: text, bytes, blob, stream; nested directories; writeFiles', async () => {
  const sbx = await Sandbox.create()
  try {
    const f = sbx.files
    const e = await f.write('/home/user/a.txt', 'hello')
    assert.deepEqual({ name: e.name, type: e.type, path: e.path }, { name: 'a.txt', type: FileType.FILE, path: '/home/user/a.txt' })
    assert.equal(await f.read('/home/user/a.txt'), 'hello')
    assert.equal(await f.read('a.txt'), 'hello', 'relative to the home')
    assert.equal(await f.read('~/a.txt'), 'hello')
    assert.equal(await f.read('/work/a.txt'), 'hello', 'the home is the workspace')

    const bytes = new Uint8Array([0, 1, 2, 127, 128, 255])
    await f.write('bin/data.bin', bytes)
    assert.deepEqual(await f.read('bin/data.bin', { format: 'bytes' }), bytes)
    await f.write('b.txt', new Blob(['from a blob']))
    const blob = await f.read('b.txt', { format: 'blob' })
    assert.equal(await blob.text(), 'from a blob')

    // A stream is uploaded as an application/octet-stream body.
    const body = new ReadableStream({ start (c) { c.enqueue(new TextEncoder().encode('streamed')); c.close() } })
    const se = await f.write('/home/user/s.txt', body)
    assert.equal(se.path, '/home/user/s.txt')
    const rs = await f.read('s.txt', { format: 'stream' })
    assert.equal(await new Response(rs).text(), 'streamed')
    await f.write('o.txt', 'octet', { useOctetStream: true })
    assert.equal(await f.read('o.txt'), 'octet')
    await f.write('g.txt', 'zipped on the way', { gzip: true })
    assert.equal(await f.read('g.txt', { gzip: true }), 'zipped on the way')

    await f.write('/home/user/new/nested/dir/n.txt', 'deep')
    assert.equal(await f.read('new/nested/dir/n.txt'), 'deep')
    await f.write('empty.txt', '')
    assert.equal(await f.read('empty.txt'), '')

    const many = await f.writeFiles([
      { path: '/home/user/m1.txt', data: 'one' },
      { path: 'm/m2.txt', data: 'two' },
      { path: '/work/m/m3.txt', data: new Uint8Array([51]) },
    ])
    assert.deepEqual(many.map((x) => x.path), ['/home/user/m1.txt', '/home/user/m/m2.txt', '/work/m/m3.txt'])
    assert.equal(await f.read('m1.txt'), 'one')
    assert.equal(await f.read('/home/user/m/m2.txt'), 'two')
    assert.equal(await f.read('m/m3.txt'), '3')

    await assert.rejects(f.read('/home/user/missing.txt'), (err) => {
      assert.ok(err instanceof NotFoundError && err instanceof FileNotFoundError, `${err?.name}: ${err?.message}`)
      assert.match(err.message, /\/home\/user\/missing\.txt/)
      return true
    })
    await assert.rejects(f.read('/home/user/new'), InvalidArgumentError, 'a directory is not read')
  } finally {
    await sbx.kill()
  }
})

test('list, exists, getInfo, makeDir, rename, remove', async () => {
  const sbx = await Sandbox.create()
  try {
    const f = sbx.files
    await f.write('top.txt', '12345')
    await f.write('d/inner.txt', 'x')
    await f.write('d/e/deeper.txt', 'y')

    const one = await f.list('/home/user')
    const byName = Object.fromEntries(one.map((x) => [x.name, x]))
    assert.deepEqual(Object.keys(byName).sort(), ['d', 'top.txt'])
    assert.equal(byName.d.type, FileType.DIR)
    assert.equal(byName.d.path, '/home/user/d')
    assert.equal(byName['top.txt'].type, FileType.FILE)
    assert.equal(byName['top.txt'].size, 5)
    assert.ok(byName['top.txt'].modifiedTime instanceof Date && Math.abs(byName['top.txt'].modifiedTime - Date.now()) < 120_000)
    const two = await f.list('/home/user', { depth: 2 })
    assert.deepEqual(two.map((x) => x.path).sort(), ['/home/user/d', '/home/user/d/e', '/home/user/d/inner.txt', '/home/user/top.txt'])
    const sub = await f.list('/work/d')
    assert.deepEqual(sub.map((x) => x.path).sort(), ['/work/d/e', '/work/d/inner.txt'])
    await assert.rejects(f.list('nowhere'), FileNotFoundError)
    await assert.rejects(f.list('top.txt'), InvalidArgumentError)

    assert.equal(await f.exists('top.txt'), true)
    assert.equal(await f.exists('/home/user/d'), true)
    assert.equal(await f.exists('/home/user/nope.txt'), false)
    const info = await f.getInfo('/home/user/top.txt')
    assert.deepEqual({ name: info.name, type: info.type, path: info.path, size: info.size }, { name: 'top.txt', type: FileType.FILE, path: '/home/user/top.txt', size: 5 })
    const home = await f.getInfo('/home/user')
    assert.equal(home.type, FileType.DIR)
    await assert.rejects(f.getInfo('nope.txt'), FileNotFoundError)

    assert.equal(await f.makeDir('/home/user/made/here'), true)
    assert.equal(await f.makeDir('/home/user/made/here'), false, 'it is there already')
    assert.equal((await f.getInfo('made/here')).type, FileType.DIR)
    assert.equal(await f.makeDir('/home/user'), false)
    await assert.rejects(f.makeDir('top.txt'), InvalidArgumentError, 'a file is in the way')

    const moved = await f.rename('/home/user/top.txt', '/home/user/made/top2.txt')
    assert.equal(moved.path, '/home/user/made/top2.txt')
    assert.equal(moved.type, FileType.FILE)
    assert.equal(await f.exists('top.txt'), false)
    assert.equal(await f.read('made/top2.txt'), '12345')
    const dir = await f.rename('d', 'd2')
    assert.equal(dir.type, FileType.DIR)
    assert.equal(dir.path, '/home/user/d2')
    assert.equal(await f.read('d2/e/deeper.txt'), 'y')
    assert.equal(await f.exists('d'), false)
    await assert.rejects(f.rename('nothing.txt', 'x.txt'), FileNotFoundError)
    await assert.rejects(f.rename('d2', 'd2/inside'), InvalidArgumentError)

    await f.remove('/home/user/made/top2.txt')
    assert.equal(await f.exists('made/top2.txt'), false)
    await f.remove('d2')
    assert.equal(await f.exists('d2'), false)
    // As envd (os.RemoveAll): removing what is not there succeeds.
    await f.remove('/home/user/never-was.txt')
  } finally {
    await sbx.kill()
  }
})

test('watchDir sees what is written after it starts, recursive or not, and ends when stopped', async () => {
  const sbx = await Sandbox.create()
  try {
    const f = sbx.files
    await f.makeDir('w')
    const flat = []
    const deep = []
    const h1 = await f.watchDir('/home/user/w', (e) => flat.push(e))
    const h2 = await f.watchDir('w', (e) => deep.push(e), { recursive: true })
    await f.write('w/new.txt', 'x')
    await f.write('w/sub/deeper.txt', 'y')
    const show = (evs) => () => JSON.stringify(evs)
    await waitFor(() => flat.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE), 10_000, show(flat))
    await waitFor(() => deep.some((e) => e.name === 'sub/deeper.txt' && e.type === FilesystemEventType.CREATE), 10_000, show(deep))
    assert.ok(deep.some((e) => e.name === 'new.txt'), show(deep)())
    await f.write('w/new.txt', 'longer now')
    await waitFor(() => flat.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.WRITE), 10_000, show(flat))
    await f.remove('w/new.txt')
    await waitFor(() => flat.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.REMOVE), 10_000, show(flat))
    assert.ok(!flat.some((e) => e.name.includes('/')), `not recursive: ${show(flat)()}`)
    await h1.stop()
    await h2.stop()

    // A stopped watch gives its place back: a session holds at most 8.
    for (let i = 0; i < 10; i++) {
      const h = await f.watchDir('w', () => {})
      await h.stop()
      await new Promise((resolve) => setTimeout(resolve, 300))
    }
    // The stream ends at the watch's timeout, and says so.
    let exited
    const done = new Promise((resolve) => { exited = resolve })
    await f.watchDir('w', () => {}, { timeoutMs: 1000, onExit: (err) => exited(err ?? 'no error') })
    const why = await done
    assert.ok(why instanceof Error, `onExit: ${why}`)

    await assert.rejects(f.watchDir('/home/user/not-a-dir', () => {}), FileNotFoundError)
  } finally {
    await sbx.kill()
  }
})

test('file metadata: written with a file, shown by getInfo, list and rename, replaced by the next write, set from inside', async () => {
  const sbx = await Sandbox.create()
  try {
    const f = sbx.files
    const meta = { author: 'mish', purpose: 'upload' }
    assert.deepEqual((await f.write('m.txt', 'with metadata', { metadata: meta })).metadata, meta)
    assert.deepEqual((await f.getInfo('m.txt')).metadata, meta)
    assert.deepEqual((await f.write('o.txt', 'octet', { metadata: meta, useOctetStream: true })).metadata, meta)
    assert.deepEqual((await f.getInfo('/home/user/o.txt')).metadata, meta)

    const infos = await f.writeFiles([{ path: 'md/1.txt', data: '1' }, { path: 'md/2.txt', data: '2' }], { metadata: { source: 'suite' } })
    assert.equal(infos.length, 2)
    for (const i of infos) assert.deepEqual((await f.getInfo(i.path)).metadata, { source: 'suite' })
    const listed = (await f.list('md')).find((e) => e.name === '1.txt')
    assert.deepEqual(listed.metadata, { source: 'suite' })

    assert.deepEqual((await f.rename('m.txt', 'moved.txt')).metadata, meta)
    assert.equal((await f.write('moved.txt', 'plain')).metadata, undefined)
    assert.equal((await f.getInfo('moved.txt')).metadata, undefined)

    // What a program in the sandbox sets under user.e2b. is metadata too.
    await f.write('x.txt', 'x')
    await sbx.commands.run('python3 -c "import os; os.setxattr(\'/home/user/x.txt\', \'user.e2b.by\', b\'cell\')"')
    assert.deepEqual((await f.getInfo('x.txt')).metadata, { by: 'cell' })

    await assert.rejects(f.write('bad.txt', 'x', { metadata: { 'bad key': 'v' } }), InvalidArgumentError)
    assert.equal(await f.exists('bad.txt'), false)
  } finally {
    await sbx.kill()
  }
})

test('watchDir with includeEntry: each event carries its entry; allowNetworkMounts is accepted', async () => {
  const sbx = await Sandbox.create()
  try {
    const f = sbx.files
    await f.makeDir('we')
    const evs = []
    const h = await f.watchDir('we', (e) => evs.push(e), { includeEntry: true, allowNetworkMounts: true })
    await f.write('we/a.txt', 'abc')
    await waitFor(() => evs.some((e) => e.name === 'a.txt' && e.entry), 10_000, () => JSON.stringify(evs))
    const e = evs.find((e) => e.name === 'a.txt' && e.entry)
    assert.equal(e.entry.path, '/home/user/we/a.txt')
    assert.equal(e.entry.type, FileType.FILE)
    assert.equal(e.entry.size, 3)
    await f.remove('we/a.txt')
    await waitFor(() => evs.some((e) => e.type === FilesystemEventType.REMOVE), 10_000, () => JSON.stringify(evs))
    assert.equal(evs.find((e) => e.type === FilesystemEventType.REMOVE).entry, undefined)
    await h.stop()
  } finally {
    await sbx.kill()
  }
})

test('paths outside the workspace are refused by name; /envs', async () => {
  const sbx = await Sandbox.create({ envs: { GREETING: 'hi', N: '1' } })
  try {
    const f = sbx.files
    const outside = (err) => {
      assert.ok(err instanceof SandboxError, `${err?.name}: ${err?.message}`)
      assert.match(err.message, /outside the workspace/)
      assert.match(err.message, /\/work/)
      assert.match(err.message, /\/home\/user/)
      return true
    }
    await assert.rejects(f.read('/etc/passwd'), outside)
    await assert.rejects(f.write('/tmp/x.txt', 'no'), outside)
    await assert.rejects(f.list('/'), outside)
    await assert.rejects(f.exists('/home/user/../other/x'), outside)
    await assert.rejects(f.makeDir('/opt/x'), outside)
    await assert.rejects(f.rename('/home/user/x', '/etc/x'), outside)
    await assert.rejects(f.remove('/usr'), outside)
    await assert.rejects(f.watchDir('/var', () => {}), outside)

    // GET /envs is not called by the SDK: a plain request, as the SDK
    // addresses envd.
    const res = await fetch(`${sbx.envdApiUrl}/envs`, {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sbx.envdAccessToken },
    })
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), { GREETING: 'hi', N: '1' })
  } finally {
    await sbx.kill()
  }
})

test('signed URLs: downloadUrl and uploadUrl of a secure sandbox work without a header token, and expire', async () => {
  const sbx = await Sandbox.create({ secure: true })
  const other = await Sandbox.create({ secure: true })
  try {
    await sbx.files.write('hello.txt', 'hello world')
    await other.files.write('hello.txt', 'the other one')
    // A signed URL is fetched as a browser would, with nothing but the
    // URL: with E2B_SANDBOX_URL it names no sandbox, and its signature
    // (made with the sandbox's token) is what finds and admits it.
    const url = await sbx.downloadUrl('hello.txt', { useSignatureExpiration: 600 })
    assert.match(url, /signature=v1_/)
    let res = await fetch(url)
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'hello world')
    res = await fetch(await other.downloadUrl('hello.txt'))
    assert.equal(await res.text(), 'the other one')
    // With the routing headers (E2B_DOMAIN's host would do the same).
    const route = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
    res = await fetch(url, { headers: route })
    assert.equal(await res.text(), 'hello world')

    const up = await sbx.uploadUrl('up.txt')
    const form = new FormData()
    form.append('file', new Blob(['uploaded']), 'up.txt')
    res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.text())
    assert.equal(await sbx.files.read('up.txt'), 'uploaded')

    // A read's URL does not write, a forged signature admits nothing, and
    // an expired one is refused as envd refuses it.
    res = await fetch(url, { method: 'POST', body: form })
    assert.equal(res.status, 401)
    res = await fetch(url.replace(/signature=v1_[^&]*/, 'signature=v1_forged'))
    assert.equal(res.status, 401)
    const expired = await sbx.downloadUrl('hello.txt', { useSignatureExpiration: -10 })
    res = await fetch(expired)
    assert.equal(res.status, 401)
    assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })
  } finally {
    await sbx.kill()
    await other.kill()
  }
})
