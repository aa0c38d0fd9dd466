#!/usr/bin/env bash
# The README's command reference equals what the binary accepts:
#   - each command's flags in the README's usage block ("## Commands") are exactly the
#     flags `lct COMMAND --help` lists (config keys, --section.key, aside);
#   - the key table's keys are exactly the --section.key options of `lct train --help`
#     (tests/config/config_test.cpp checks the table's defaults against the built-in ones);
#   - every Debian package scripts/setup.sh installs is named in the README.
set -euo pipefail
LCT=$1
README=$2
failed=0

python3 - "$LCT" "$README" <<'EOF' || failed=1
import re, subprocess, sys
lct, readme = sys.argv[1], sys.argv[2]
text = open(readme).read()
block = text.split("## Commands", 1)[1].split("```", 2)[1]
usage = {}
current = None
for line in block.splitlines():
    m = re.match(r"lct (\S+)", line)
    if m:
        current = m.group(1)
        usage.setdefault(current, set())
    if current:
        usage[current] |= {f for f in re.findall(r"--[a-z][a-z0-9-]*(?:\.[A-Za-z_]+)?", line) if "." not in f}

def help_flags(command):
    out = subprocess.run([lct, command, "--help"], capture_output=True, text=True, check=True).stdout
    flags, keys = set(), set()
    for line in out.splitlines():
        m = re.match(r"\s+(?:-\w,)?(--[a-z][a-z0-9_.-]*)", line)  # the option column
        if m:
            (keys if "." in m.group(1) else flags).add(m.group(1))
    flags -= {"--help", "--help-all"}  # every command has them
    return flags, keys

ok = True
commands = ["train", "eval", "make-batch", "inspect", "bench", "simulate", "export", "generate"]
for c in commands:
    flags, _ = help_flags(c)
    if c not in usage:
        print(f"FAIL: the README's usage block has no 'lct {c}'"); ok = False; continue
    missing, extra = flags - usage[c], usage[c] - flags
    if missing or extra:
        print(f"FAIL: lct {c}: README lacks {sorted(missing)}, README has unknown {sorted(extra)}"); ok = False
    else:
        print(f"ok   lct {c}: {len(flags)} flags, the README lists the same")
extra_commands = set(usage) - set(commands)
if extra_commands:
    print(f"FAIL: the README documents unknown commands {sorted(extra_commands)}"); ok = False

# lct builds only the options of the command it runs (src/cli/dispatch.cpp); the top-level help
# still lists every command, --help-all shows every command's flags, and `lct --help
# train` is train's help as `lct train --help` is
out = subprocess.run([lct, "--help"], capture_output=True, text=True).stdout
listed = {c for c in commands if re.search(rf"^  {re.escape(c)} ", out, re.M)}
if listed != set(commands):
    print(f"FAIL: lct --help lists {sorted(listed)}, not every command"); ok = False
else:
    print(f"ok   lct --help lists the {len(commands)} commands")
out = subprocess.run([lct, "--help-all"], capture_output=True, text=True).stdout
if not all(f in out for f in ("--max-new-tokens", "--attention-lengths", "--grads-out", "--ranks")):
    print("FAIL: lct --help-all lacks some command's flags"); ok = False
else:
    print("ok   lct --help-all shows every command's flags")
a, b = (subprocess.run([lct] + args, capture_output=True, text=True).stdout for args in (["--help", "train"], ["train", "--help"]))
if a != b or "--train.steps" not in a:
    print("FAIL: lct --help train differs from lct train --help"); ok = False
else:
    print("ok   lct --help train is lct train --help")

_, keys = help_flags("train")
table = set(re.findall(r"^\| `([a-z0-9_]+\.[a-z0-9_]+)`", text, re.M))
help_keys = {k[2:] for k in keys}
if table != help_keys:
    print(f"FAIL: key table lacks {sorted(help_keys - table)}, has unknown {sorted(table - help_keys)}"); ok = False
else:
    print(f"ok   the key table holds the {len(table)} keys of lct train --help")
sys.exit(0 if ok else 1)
EOF

# the packages of setup.sh's packages=(...) and packages+=(...) lists, comments dropped
python3 - "$(dirname "$README")/scripts/setup.sh" "$README" <<'EOF' || failed=1
import re, sys
setup, readme = (open(f).read() for f in sys.argv[1:])
lists = re.findall(r"\bpackages\+?=\((.*?)\)", re.sub(r"#.*", "", setup), re.S)
packages = [p for l in lists for p in l.split()]
missing = [p for p in packages if not re.search(rf"(?<![\w.-]){re.escape(p)}(?![\w.-])", readme)]
if len(packages) < 15 or missing:
    print(f"FAIL: setup.sh's packages {packages}: the README does not name {missing}"); sys.exit(1)
print(f"ok   the README names the {len(packages)} packages scripts/setup.sh installs")
EOF

[ "$failed" = 0 ] && echo "README commands: all checks passed"
exit "$failed"
