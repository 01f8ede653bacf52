// An E2B-style agent loop, as the field writes them for E2B's cloud: an
// OpenAI-compatible chat model that calls a run_python tool, the tool run
// with @e2b/code-interpreter's runCode, its result or error handed back,
// until the model answers. The model is a fake server on loopback that
// scripts the turns; the sandbox is jailcell's, through the stock SDK.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox } from '@e2b/code-interpreter'

// fakeModel answers chat completions: first a cell with a bug, then, once
// it sees the NameError come back, the fixed cell, then the answer built
// from the tool's last output.
function fakeModel() {
  const seen = []
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => { body += c })
    req.on('end', () => {
      const { messages } = JSON.parse(body)
      seen.push(messages)
      const tools = messages.filter((m) => m.role === 'tool')
      const call = (code) => ({ role: 'assistant', content: null, tool_calls: [{ id: `call_${tools.length}`, type: 'function', function: { name: 'run_python', arguments: JSON.stringify({ code }) } }] })
      let message
      if (tools.length === 0) {
        message = call('import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})\ntotal = df.x.sum() + undefined_bonus\ntotal')
      } else if (tools.at(-1).content.includes('NameError')) {
        message = call('bonus = 36\ntotal = int(df.x.sum()) + bonus\ntotal')
      } else {
        message = { role: 'assistant', content: `The total is ${tools.at(-1).content.trim()}.` }
      }
      res.setHeader('Content-Type', 'application/json')
      res.end(JSON.stringify({ id: 'cmpl', object: 'chat.completion', choices: [{ index: 0, message, finish_reason: message.tool_calls ? 'tool_calls' : 'stop' }] }))
    })
  })
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, seen, url: `http://127.0.0.1:${server.address().port}` })))
}

async function chat(url, messages) {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'fake', messages, tools: [{ type: 'function', function: { name: 'run_python', parameters: { type: 'object', properties: { code: { type: 'string' } } } } }] }),
  })
  return (await res.json()).choices[0].message
}

test('an agent fixes its own cell and answers from the sandbox', async () => {
  const model = await fakeModel()
  const sbx = await Sandbox.create()
  try {
    const messages = [{ role: 'user', content: 'Sum column x and add the bonus.' }]
    let answer
    for (let turn = 0; turn < 5 && answer === undefined; turn++) {
      const msg = await chat(model.url, messages)
      messages.push(msg)
      if (!msg.tool_calls) {
        answer = msg.content
        break
      }
      for (const tc of msg.tool_calls) {
        const { code } = JSON.parse(tc.function.arguments)
        const exec = await sbx.runCode(code)
        const content = exec.error ? `${exec.error.name}: ${exec.error.value}\n${exec.error.traceback}` : (exec.text ?? exec.logs.stdout.join(''))
        messages.push({ role: 'tool', tool_call_id: tc.id, content })
      }
    }
    assert.equal(answer, 'The total is 42.')
    assert.equal(model.seen.length, 3, 'three model turns: the bug, the fix, the answer')
    // The first cell's DataFrame was still there for the fix: state kept
    // across the failed cell.
    assert.equal((await sbx.runCode('len(df), total')).text, '(3, 42)')
  } finally {
    await sbx.kill()
    model.server.close()
  }
})
