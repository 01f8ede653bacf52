// A sandbox's own servers through E2B's stock JS SDK (npm e2b), unchanged:
// getHost(port) names PORT-ID.DOMAIN (e2b.domain), which the door passes
// to the server a command started on that port of the sandbox's loopback.
// The service runs with e2b.public_ports: true (e2bsdk_test.go), so a
// sandbox made as E2B's are is reached without a token, one made with
// network.allowPublicTraffic false only with its trafficAccessToken.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox } from 'e2b'

// An HTTP server that answers each request with its method, path and
// headers as JSON (what the door passed on), or switches protocols.
const echo = `import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Upgrade") == "jc-echo":
            # A protocol switch, as a WebSocket's: then each chunk echoed in capitals.
            self.send_response(101); self.send_header("Upgrade", "jc-echo"); self.send_header("Connection", "Upgrade"); self.end_headers(); self.wfile.flush()
            while data := self.connection.recv(1024):
                self.connection.sendall(data.upper())
            self.close_connection = True
            return
        b = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// get sends GET path to the door (E2B_SANDBOX_URL's address) with the
// Host header given, as a browser resolving PORT-ID.DOMAIN would.
function get (host, path = '/', headers = {}) {
  const door = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request({ host: door.hostname, port: door.port, path, headers: { host, ...headers } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

// until polls get until it answers 200 (the server is starting).
async function until (host, headers = {}) {
  const end = Date.now() + 30_000
  for (;;) {
    const r = await get(host, '/x?y=1', headers)
    if (r.status === 200) return JSON.parse(r.body)
    if (Date.now() > end) assert.fail(`no 200 from ${host} within 30 s: ${r.status} ${r.body}`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}

// serving makes a sandbox (opts as Sandbox.create's), starts the echo
// server on port in it from a background command, waits for it to answer
// through the door (with headers), and calls fn(sbx, host); the sandbox is
// killed after.
async function serving (opts, port, fn, headers = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, ...opts })
  try {
    await sbx.files.write('echo.py', echo)
    await sbx.commands.run(`python3 echo.py ${port}`, { background: true })
    const host = sbx.getHost(port)
    await until(host, typeof headers === 'function' ? headers(sbx) : headers)
    await fn(sbx, host)
  } finally {
    await sbx.kill()
  }
}

test('a server a command started answers at getHost(port), without the door\'s credentials passed on', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    const host = sbx.getHost(8000)
    assert.equal(host, `8000-${sbx.sandboxId}.${process.env.JC_E2B_DOMAIN}`)
    const closed = await get(host)
    assert.equal(closed.status, 502, 'nothing listens yet')
    assert.match(closed.body, /port 8000/)
    await sbx.files.write('echo.py', echo)
    const srv = await sbx.commands.run('python3 echo.py 8000', { background: true })
    const seen = await until(host)
    assert.equal(seen.path, '/x?y=1')
    assert.equal(seen.headers.host, host, 'the app sees the host its client asked for')
    assert.ok(seen.headers['x-forwarded-for'], JSON.stringify(seen.headers))
    // With E2B_SANDBOX_URL's headers, and the sandbox's token sent: the
    // token and the routing headers stay with the door.
    const door = new URL(process.env.E2B_SANDBOX_URL).host
    const viaHeaders = await until(door, { 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': '8000', 'e2b-traffic-access-token': sbx.trafficAccessToken })
    for (const h of ['e2b-sandbox-id', 'e2b-sandbox-port', 'e2b-traffic-access-token', 'x-access-token']) {
      assert.equal(viaHeaders.headers[h], undefined, `${h} passed to the sandbox's server`)
    }
    // A wrong token is refused, never taken for public traffic.
    assert.equal((await get(host, '/', { 'e2b-traffic-access-token': 'not-the-token' })).status, 401)
    // Another sandbox's loopback has nothing on that port.
    const other = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      assert.equal((await get(other.getHost(8000))).status, 502)
    } finally {
      await other.kill()
    }
    await srv.kill()
  } finally {
    await sbx.kill()
  }
})

test('E2B\'s own case: `python -m http.server 8000` (every address, `python` as in E2B\'s templates) answers at getHost(8000)', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await sbx.files.write('index.html', 'served')
    const srv = await sbx.commands.run('python -m http.server 8000', { background: true })
    const host = sbx.getHost(8000)
    const end = Date.now() + 30_000
    let r = await get(host, '/index.html')
    while (r.status !== 200 && Date.now() < end) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      r = await get(host, '/index.html')
    }
    assert.equal(r.status, 200, r.body)
    assert.equal(r.body, 'served')
    await srv.kill()
  } finally {
    await sbx.kill()
  }
})

test('network.allowPublicTraffic false: its ports need its trafficAccessToken', async () => {
  await serving({ network: { allowPublicTraffic: false } }, 8080, async (sbx, host) => {
    const r = await get(host)
    assert.equal(r.status, 401)
    assert.match(r.body, /e2b-traffic-access-token/)
  }, (sbx) => ({ 'e2b-traffic-access-token': sbx.trafficAccessToken }))
})

test('a paused sandbox\'s server answers 502 until connect resumes it, then answers again', async () => {
  await serving({}, 8000, async (sbx, host) => {
    assert.equal(await sbx.pause(), true)
    const paused = await get(host)
    assert.equal(paused.status, 502)
    assert.match(paused.body, /paused/)
    await sbx.connect()
    assert.equal((await until(host)).path, '/x?y=1', 'the server came back with the sandbox')
  })
})

test('autoResume: a request to a paused sandbox\'s server resumes it, and the server answers', async () => {
  await serving({ lifecycle: { onTimeout: 'pause', autoResume: true } }, 8000, async (sbx, host) => {
    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    const r = await get(host, '/woken')
    assert.equal(r.status, 200, r.body)
    assert.equal(JSON.parse(r.body).path, '/woken')
    assert.equal((await sbx.getInfo()).state, 'running')
  })
})

test('a protocol switch (as a WebSocket\'s) passes through both ways', async () => {
  await serving({}, 8000, async (sbx, host) => {
    const door = new URL(process.env.E2B_SANDBOX_URL)
    const echoed = await new Promise((resolve, reject) => {
      const req = http.request({ host: door.hostname, port: door.port, path: '/ws', headers: { host, connection: 'Upgrade', upgrade: 'jc-echo' } })
      req.on('upgrade', (res, socket) => {
        let got = ''
        socket.setEncoding('utf8')
        socket.on('data', (d) => {
          got += d
          if (got.length >= 11) { socket.end(); resolve(got) }
        })
        socket.on('error', reject)
        socket.write('hello ')
        socket.write('world')
      })
      req.on('response', (res) => reject(new Error(`no switch: ${res.statusCode}`)))
      req.on('error', reject)
      req.end()
    })
    assert.equal(echoed, 'HELLO WORLD')
  })
})
