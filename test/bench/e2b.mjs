// The "e2b" bench section's client: E2B's stock SDKs, unchanged, against
// jailcell's E2B door (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), and the
// same cell over jailcell's own HTTP API on its TCP listener
// (JAILCELL_URL, JAILCELL_TOKEN) from the same node, so the two round
// trips differ only in the protocol. Prints one JSON object of samples in
// milliseconds.
import { Sandbox } from '@e2b/code-interpreter'

const N = Number(process.env.N || 200)
const BURST = Number(process.env.BURST || 20)
const now = () => performance.now()

async function own(path, body) {
  const res = await fetch(process.env.JAILCELL_URL + path, {
    method: 'POST',
    headers: { Authorization: `Bearer ${process.env.JAILCELL_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  })
  const out = await res.json()
  if (!res.ok) throw new Error(`${path}: ${res.status} ${JSON.stringify(out)}`)
  return out
}

const out = { sdk_rt: [], own_rt: [], tti_seq: [], tti_burst: [] }

// runCode round trip, warm: x += 1 in a session that has run x = 0.
const sbx = await Sandbox.create()
await sbx.runCode('x = 0')
for (let i = 0; i < 20; i++) await sbx.runCode('x += 1')
for (let i = 0; i < N; i++) {
  const t = now()
  const e = await sbx.runCode('x += 1')
  out.sdk_rt.push(now() - t)
  if (e.error) throw new Error(`runCode: ${e.error.name}: ${e.error.value}`)
}
await sbx.kill()

// The same cell over jailcell's own API.
const { session } = await own('/v1/sessions', {})
await own(`/v1/sessions/${session}/exec`, { code: 'x = 0' })
for (let i = 0; i < 20; i++) await own(`/v1/sessions/${session}/exec`, { code: 'x += 1' })
for (let i = 0; i < N; i++) {
  const t = now()
  await own(`/v1/sessions/${session}/exec`, { code: 'x += 1' })
  out.own_rt.push(now() - t)
}
await fetch(`${process.env.JAILCELL_URL}/v1/sessions/${session}`, { method: 'DELETE', headers: { Authorization: `Bearer ${process.env.JAILCELL_TOKEN}` } })

// Time to interactive, as ComputeSDK measures hosted sandboxes: create,
// then a first command answered.
async function interactive() {
  const t = now()
  const s = await Sandbox.create()
  const r = await s.commands.run('true')
  const d = now() - t
  if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  await s.kill()
  return d
}
for (let i = 0; i < BURST; i++) {
  out.tti_seq.push(await interactive())
  await new Promise((r) => setTimeout(r, 300)) // as an agent's sessions come: the pool refills between them
}
await new Promise((r) => setTimeout(r, 3000))
out.tti_burst = await Promise.all(Array.from({ length: BURST }, interactive))
console.log(JSON.stringify(out))
