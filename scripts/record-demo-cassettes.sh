#!/usr/bin/env bash
# Re-records examples/demo/cassettes/ with the real cowork-harness and the agent double, no model.
#
#   COWORK_HARNESS_BIN=/path/to/cowork-harness scripts/record-demo-cassettes.sh
#
# What it does:
#   1. writes what the agent does in each demo scenario as a played transcript (below): it
#      launches the csv-report skill, writes outputs/report.md and answers in one line;
#   2. copies examples/demo into a fresh git work tree (the harness stages committed files only)
#      in which the cassettes dir is ignored (the harness refuses to record a protocol cassette
#      into a path git would commit);
#   3. runs `cowork-harness record` on each scenario of examples/demo/protocol/, with the agent
#      double cli/tests/fixtures/upstream/agent/claude first on PATH playing the transcripts;
#   4. checks every recording passed and holds no path of this machine, then copies the
#      cassettes into examples/demo/cassettes/ (same relative place, so their session and
#      skill paths resolve as recorded).
# The recordings differ between runs only in times and ids. Needs node >= 20 (the harness),
# python3 and git. Set COWORK_HARNESS_BIN, or have cowork-harness on PATH.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

harness="${COWORK_HARNESS_BIN:-$(command -v cowork-harness || true)}"
[ -n "$harness" ] && [ -x "$harness" ] || {
  echo "record-demo-cassettes: set COWORK_HARNESS_BIN to the cowork-harness program (none on PATH)" >&2
  exit 2
}
harness="$(cd "$(dirname "$harness")" && pwd)/$(basename "$harness")"
agent_dir="$repo/cli/tests/fixtures/upstream/agent"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/transcripts" "$work/tree/examples" "$work/runs" "$work/tmp"

# 1. The played transcripts: one per scenario, matched to it by its prompt. Each tool call the
# harness must allow goes through a can_use_tool request, as the real agent's would.
python3 - "$work/transcripts" "$repo/examples/demo/protocol" <<'PY'
import json, os, sys

out, scenarios = sys.argv[1], sys.argv[2]
session_id = "00000000-0000-4000-8000-000000000001"
report = ("# Sales report\n\n| region | total |\n|---|---|\n| east | 1550 |\n| north | 1850 |\n"
          "| south | 800 |\n\nOverall: 4200\n")
replies = {
    "csv-report": "Wrote outputs/report.md.",
    "skill-triggers": "Sales total 4200 across 3 regions (north 1850, east 1550, south 800); "
                      "the table is in outputs/report.md.",
}

def prompt_of(name):
    # The scenarios' prompts are YAML block scalars (`prompt: |`): the indented lines after it.
    lines, taking = [], False
    for line in open(os.path.join(scenarios, name + ".yaml"), encoding="utf-8"):
        if line.startswith("prompt: |"):
            taking = True
        elif taking and line.startswith("  "):
            lines.append(line[2:])
        elif taking:
            break
    return "".join(lines)

def transcript(name):
    events = [{"type": "system", "subtype": "init", "cwd": "/sessions/cowork-demo",
               "session_id": session_id, "tools": ["AskUserQuestion", "Bash", "Read", "Skill", "Write"],
               "mcp_servers": [], "model": "claude-sonnet-4-5", "permissionMode": "default"}]

    def assistant(message_id, content):
        events.append({"type": "assistant", "parent_tool_use_id": None, "session_id": session_id,
                       "message": {"model": "claude-sonnet-4-5", "id": message_id, "type": "message",
                                   "role": "assistant", "content": content, "stop_reason": None,
                                   "usage": {"input_tokens": 0, "output_tokens": 0}}})

    def tool(tool_id, tool_name, tool_input, result, message_id):
        assistant(message_id, [{"type": "tool_use", "id": tool_id, "name": tool_name, "input": tool_input}])
        events.append({"type": "control_request", "request_id": "req-" + tool_id,
                       "request": {"subtype": "can_use_tool", "tool_name": tool_name,
                                   "input": tool_input, "tool_use_id": tool_id}})
        events.append({"type": "user", "parent_tool_use_id": None, "session_id": session_id,
                       "message": {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": tool_id, "content": result}]}})

    tool("toolu_demo_skill", "Skill", {"skill": "csv-report:csv-report"},
         "Launching skill: csv-report:csv-report", "msg_demo_1")
    tool("toolu_demo_write", "Write", {"file_path": "outputs/report.md", "content": report},
         "File created successfully at: outputs/report.md", "msg_demo_2")
    assistant("msg_demo_3", [{"type": "text", "text": replies[name]}])
    events.append({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 0,
                   "duration_api_ms": 0, "num_turns": 3, "result": replies[name],
                   "stop_reason": "end_turn", "session_id": session_id, "total_cost_usd": 0,
                   "usage": {"input_tokens": 0, "output_tokens": 0,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
    played = {"scenario": {"name": name, "prompt": prompt_of(name)},
              "events": [json.dumps(e, separators=(",", ":")) for e in events], "controlOut": []}
    with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(played, f, indent=1)

for name in replies:
    transcript(name)
PY

# 2. A work tree of its own: the demo, committed, with the cassettes dir ignored.
cp -R "$repo/examples/demo" "$work/tree/examples/demo"
rm -f "$work/tree/examples/demo/cassettes/"*
echo "examples/demo/cassettes/" >"$work/tree/.gitignore"
(
  cd "$work/tree"
  git init -q
  git add -A
  git -c user.name=record-demo-cassettes -c user.email=record@localhost commit -qm demo
)

# 3. Record each protocol scenario.
for scenario in "$work/tree/examples/demo/protocol/"*.yaml; do
  name="$(basename "$scenario" .yaml)"
  out="examples/demo/cassettes/$name.cassette.json"
  (
    cd "$work/tree"
    env -i PATH="$agent_dir:$PATH" HOME="$work" TMPDIR="$work/tmp" NO_COLOR=1 \
      FAKE_CLAUDE_CASSETTES="$work/transcripts" ANTHROPIC_API_KEY=not-a-key-nothing-is-called \
      "$harness" --run-dir "$work/runs" record "examples/demo/protocol/$name.yaml" \
      --out "$out" --output-format json >"$work/$name.envelope.json" 2>"$work/$name.stderr"
  ) || {
    echo "record-demo-cassettes: recording $name failed; the harness said:" >&2
    cat "$work/$name.stderr" "$work/$name.envelope.json" >&2
    exit 1
  }
  # 4. A passing recording, holding no path of this machine.
  python3 - "$work/$name.envelope.json" "$work/tree/$out" "$work" <<'PY'
import json, sys
envelope = json.loads(open(sys.argv[1], encoding="utf-8").read().splitlines()[-1])
assert envelope["ok"] is True, f"{sys.argv[2]}: the recording did not pass: {envelope}"
text = open(sys.argv[2], encoding="utf-8").read()
assert sys.argv[3] not in text, f"{sys.argv[2]}: holds a path of this machine ({sys.argv[3]})"
PY
  echo "recorded $out ($(wc -c <"$work/tree/$out") bytes)" >&2
done

rm -f "$repo/examples/demo/cassettes/"*.json
mkdir -p "$repo/examples/demo/cassettes"
cp "$work/tree/examples/demo/cassettes/"*.cassette.json "$repo/examples/demo/cassettes/"
echo "examples/demo/cassettes/ re-recorded with cowork-harness $("$harness" --version)" >&2
