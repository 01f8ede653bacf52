// An example in the style of E2B's code-interpreter JS docs, run on
// jailcell: only the import changed (was: import { Sandbox } from
// "@e2b/code-interpreter"). test/tsclient runs it against a real service.
import fs from "node:fs";

import { Sandbox } from "@jailcell/client";

const sbx = await Sandbox.create(); // $JAILCELL_SOCKET, or /run/jailcell/jailcell.sock
try {
  await sbx.runCode("x = 1");
  const execution = await sbx.runCode("x+=1; x");
  console.log(execution.text); // 2

  const chart = await sbx.runCode(
    "import matplotlib.pyplot as plt\nprint('plotting')\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()",
    { onStdout: (data) => console.log(String(data).trim()), onStderr: (data) => console.error(String(data)) },
  );
  const firstResult = chart.results[0];
  if (firstResult.png) {
    fs.writeFileSync("chart.png", firstResult.png, { encoding: "base64" });
    console.log("chart.png written");
  }

  await sbx.files.write("data.txt", "hello");
  console.log(await sbx.files.read("data.txt")); // hello
} finally {
  await sbx.kill();
}
