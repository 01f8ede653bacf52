# An E2B code-interpreter program, written against E2B's SDK
# (e2b-code-interpreter 1.x/2.x) and using only what jailcell also has.
# test/pyclient/python_test.go (TestPythonE2BExample) runs it on jailcell after
# replacing only the import line below, and compares its output with
# example.out.
from e2b_code_interpreter import Sandbox, CommandExitException

sbx = Sandbox.create(envs={"GREETING": "hello"})

# Code interpreting: state persists between run_code calls.
execution = sbx.run_code("import os\nx = 21\nprint(os.environ['GREETING'], 'from the kernel')")
print("stdout:", execution.logs.stdout)
print("value:", sbx.run_code("x * 2").text)
print("per-run env:", sbx.run_code("os.environ['ONLY_HERE']", envs={"ONLY_HERE": "yes"}).text)
execution = sbx.run_code("1 / 0")
print("error:", execution.error.name, execution.error.value)

# Files.
sbx.files.make_dir("data")
sbx.files.write("data/numbers.csv", "n\n1\n2\n3\n")
print("exists:", sbx.files.exists("data/numbers.csv"), sbx.files.exists("data/missing.csv"))
print("read:", repr(sbx.files.read("data/numbers.csv")))
print("total:", sbx.run_code("import pandas as pd\nint(pd.read_csv('data/numbers.csv').n.sum())").text)

# Commands.
result = sbx.commands.run("wc -l < data/numbers.csv")
print("command:", result.exit_code, result.stdout.strip())
result = sbx.commands.run("echo $GREETING $WHO", envs={"WHO": "world"})
print("command env:", result.stdout.strip())
try:
    sbx.commands.run("echo failing >&2; exit 3")
except CommandExitException as e:
    print("exit exception:", e.exit_code, e.stderr.strip())
lines = []
handle = sbx.commands.run("for i in 1 2 3; do echo line $i; done", background=True, on_stdout=lines.append)
result = handle.wait()
print("background:", result.exit_code, "".join(lines).split("\n")[:3])
sleeper = sbx.commands.run("sleep 600", background=True)
print("killed:", sleeper.kill())

# Watching a directory.
watcher = sbx.files.watch_dir("data")
sbx.run_code("open('data/new.txt', 'w').write('new')")
import time
time.sleep(0.5)
print("events:", sorted((e.name, e.type.value) for e in watcher.get_new_events()))
watcher.stop()
sbx.files.remove("data/new.txt")
print("removed:", not sbx.files.exists("data/new.txt"))

# Lifecycle.
info = sbx.get_info()
print("info:", info.sandbox_id == sbx.sandbox_id, info.state)
sbx.set_timeout(120)
metrics = sbx.get_metrics()
print("metrics:", len(metrics) >= 1, metrics[-1].mem_used > 0, metrics[-1].cpu_count > 0)
same = Sandbox.connect(sbx.sandbox_id)
print("reconnected:", same.run_code("x").text)
sbx.kill()
print("running after kill:", sbx.is_running())
