#!/usr/bin/env bash
# The layout the codemap (docs/architecture.md) promises, checked so that it stays true:
#  1. the pure core (core/) and the HTTP client (client/) are top-level workspace members;
#  2. no file under cli/src/commands/ uses a sibling command (commands are leaves; what they
#     share sits in modules named for what it is);
#  3. the schema crate holds no verdict logic (judging lives in the core);
#  4. one flag checker: the coordinator's submitted-bundle path calls the core's
#     check_spec_flags and defines no flag rules of its own;
#  5. every module path docs/architecture.md names in backticks (crate/src/… .rs files and
#     directories) exists.
set -euo pipefail
cd "$(dirname "$0")/.."

failures=()
fail() { failures+=("$1"); }

# 1. Top-level members, read from cargo metadata (the manifest paths of the workspace members).
metadata="$(cargo metadata --no-deps --format-version 1 --locked)"
members="$(printf '%s' "$metadata" | python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
root = meta["workspace_root"]
for package in meta["packages"]:
    rel = os.path.relpath(os.path.dirname(package["manifest_path"]), root)
    print(package["name"], rel)
')"
for expected in "cowork-core core" "cowork-client client"; do
  if ! grep -qx "$expected" <<<"$members"; then
    fail "workspace member '${expected% *}' is not the top-level directory '${expected#* }/' (cargo metadata: $(grep "^${expected% *} " <<<"$members" || echo missing))"
  fi
done

# 2. Leaf commands: a command file may use its own submodules (super::, self::) but no sibling.
commands="$(find cli/src/commands -maxdepth 1 -name '*.rs' ! -name mod.rs -exec basename {} .rs \; | sort)"
for file in cli/src/commands/*.rs cli/src/commands/*/*.rs; do
  [ -f "$file" ] || continue
  [ "$(basename "$file")" = mod.rs ] && continue
  if grep -nE 'crate::commands::' "$file" >/dev/null; then
    fail "$file uses another command: $(grep -nE 'crate::commands::' "$file" | head -1)"
  fi
  own="$(basename "$file" .rs)"
  # `super::<sibling>` from a top-level command file reaches into a sibling command.
  if [ "$(dirname "$file")" = cli/src/commands ]; then
    for sibling in $commands; do
      [ "$sibling" = "$own" ] && continue
      if grep -nE "super::${sibling}\b" "$file" >/dev/null; then
        fail "$file uses the sibling command '$sibling': $(grep -nE "super::${sibling}\b" "$file" | head -1)"
      fi
    done
  fi
done

# 3. No verdict module in the schema crate.
if [ -e schema/src/verdict.rs ] || [ -e schema/src/verdict ]; then
  fail "schema/src has a verdict module; verdicts are judged in core/src/verdict"
fi
if grep -nE '^\s*pub mod verdict\b|^\s*mod verdict\b' schema/src/lib.rs >/dev/null; then
  fail "schema/src/lib.rs declares a verdict module"
fi

# 4. One flag checker.
submitted=coordinator/src/intake/submitted.rs
if ! grep -q 'check_spec_flags' "$submitted"; then
  fail "$submitted does not call the core's check_spec_flags"
fi
if grep -nE 'fn check_flags|needs repeat"|must be a single line"' "$submitted" >/dev/null; then
  fail "$submitted holds flag rules of its own: $(grep -nE 'fn check_flags|needs repeat"|must be a single line"' "$submitted" | head -1)"
fi
if ! grep -q 'pub fn check_spec_flags' core/src/plan/flags.rs; then
  fail "core/src/plan/flags.rs has no check_spec_flags"
fi

# 5. Paths named by the codemap exist.
missing_paths="$(python3 - <<'PY'
import os, re
text = open("docs/architecture.md", encoding="utf-8").read()
tops = ("schema/", "core/", "fabric/", "client/", "coordinator/", "worker/", "cli/", "testkit/", "scripts/", "docs/", "charts/", "fuzz/", "docker/", "examples/")
missing = []
for path in sorted(set(re.findall(r"`([A-Za-z0-9_./-]+)`", text))):
    if not path.startswith(tops):
        continue
    if any(ch in path for ch in "*<>"):
        continue
    if not os.path.exists(path.rstrip("/")):
        missing.append(path)
# `cowork_<crate>::module::…` names: the first module must be a file or directory of the crate.
crate_dirs = {"schema": "schema", "core": "core", "fabric": "fabric", "client": "client",
              "coordinator": "coordinator", "worker": "worker", "cli": "cli", "testkit": "testkit"}
for crate, module in sorted(set(re.findall(r"`cowork_([a-z]+)::([a-z_0-9]+)", text))):
    base = crate_dirs.get(crate)
    if base is None:
        missing.append(f"cowork_{crate} (no such crate)")
        continue
    src = os.path.join(base, "src")
    if not (os.path.exists(os.path.join(src, module + ".rs")) or os.path.isdir(os.path.join(src, module))):
        # An item of the crate root (a function or type in lib.rs) is fine too.
        lib = open(os.path.join(src, "lib.rs"), encoding="utf-8").read() if os.path.exists(os.path.join(src, "lib.rs")) else ""
        if not re.search(r"\b(fn|struct|enum|trait|type|const|use)\b[^\n]*\b" + re.escape(module) + r"\b", lib):
            missing.append(f"cowork_{crate}::{module}")
# Test names cited as the check of an invariant (snake_case with four or more words) must be
# functions somewhere in the workspace.
names = set(re.findall(r"`([a-z0-9]+(?:_[a-z0-9]+){3,})`", text))
if names:
    defined = set()
    for top in tops:
        for dirpath, _, filenames in os.walk(top.rstrip("/")):
            if "/target" in dirpath:
                continue
            for filename in filenames:
                if filename.endswith(".rs"):
                    source = open(os.path.join(dirpath, filename), encoding="utf-8", errors="replace").read()
                    defined.update(re.findall(r"\bfn ([a-z0-9_]+)", source))
    missing.extend(f"fn {name}" for name in sorted(names - defined))
print("\n".join(missing))
PY
)"
if [ -n "$missing_paths" ]; then
  while IFS= read -r path; do fail "docs/architecture.md names $path, which does not exist"; done <<<"$missing_paths"
fi

if [ "${#failures[@]}" -gt 0 ]; then
  echo "layout check failed:" >&2
  printf '  %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "layout: core and client are top-level crates, $(wc -w <<<"$commands") commands are leaves, no verdict in schema, one flag checker, every path in the codemap exists"
