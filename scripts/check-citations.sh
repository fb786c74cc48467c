#!/usr/bin/env bash
# Checks that code and docs cite only documents inside the repository.
#
# Fails (exit 1, listing file:line) when
#   (a) a `*.rs` file outside target/ and fuzz/target/ cites a document outside the repository:
#       `§`, `contract C`, `brief §` or `style rule` outside a string or char literal (test data
#       that checks output for such markers stays allowed; a literal spanning lines is not
#       recognised as one);
#   (b) a reference `<doc>.md#<anchor>` in a `*.rs`, `*.md` or `*.sh` file, for <doc> one of
#       harness-behaviour, decisions, architecture, operations and operations/<page>, names an
#       anchor that docs/<doc>.md does not have. An anchor exists when the doc has `<a id="X">`
#       or a heading whose GitHub slug is X;
#   (c) a relative link `[text](path)` or `[text](path#anchor)` in a tracked `*.md` file (or a
#       page under docs/operations/) names a file that does not exist, or an anchor that the
#       linked Markdown file does not have.
#
# Usage: scripts/check-citations.sh   (from any directory)
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0

# Files to scan, without build output and VCS metadata.
list_files() {
    find . \( -path ./target -o -path ./fuzz/target -o -path ./.git -o -name node_modules \) -prune \
        -o -type f \( "$@" \) -print | sort
}

# (a) Citations of shared documents in Rust sources.
mapfile -t rs_files < <(list_files -name '*.rs')
shared_hits=$(
    perl -Mutf8 -CSD -ne '
        my $line = $_;
        # Drop string and char literals, so test data such as ["§", "contract"] is not a citation.
        $line =~ s/"(?:[^"\\]|\\.)*"//g;
        $line =~ s/\x27(?:[^\x27\\]|\\.)\x27//g;
        if ($line =~ /§|contract C|brief §|style rule/) {
            chomp(my $text = $_);
            $text =~ s/^\s+//;
            print "$ARGV:$.: $text\n";
        }
        close ARGV if eof;
    ' "${rs_files[@]}"
)
if [[ -n "$shared_hits" ]]; then
    echo "error: comments cite documents outside the repository (use docs/harness-behaviour.md or docs/decisions.md anchors, or plain words):" >&2
    echo "$shared_hits" >&2
    fail=1
fi

# (b) Anchors of repository docs.
# Prints every anchor of docs/$1.md: explicit <a id="..."> and GitHub heading slugs.
anchors_of() {
    local doc="docs/$1.md"
    [[ -f "$doc" ]] || return 0
    { grep -o '<a id="[^"]*"' "$doc" || true; } | sed 's/^<a id="//; s/"$//'
    { grep -E '^#{1,6} ' "$doc" || true; } |
        sed -E 's/^#+ +//; s/ +#* *$//' |
        tr '[:upper:]' '[:lower:]' |
        perl -CSD -pe 's/[^\p{L}\p{N} _\n-]//g; s/ /-/g'
}

declare -A known=()
docs=(harness-behaviour decisions architecture operations)
for page in docs/operations/*.md; do
    [[ -f "$page" ]] && docs+=("operations/$(basename "$page" .md)")
done
for doc in "${docs[@]}"; do
    while IFS= read -r anchor; do
        [[ -n "$anchor" ]] && known["$doc#$anchor"]=1
    done < <(anchors_of "$doc")
done

mapfile -t ref_files < <(list_files -name '*.rs' -o -name '*.md' -o -name '*.sh')
checked=0
bad_refs=""
while IFS= read -r hit; do
    # hit = <file>:<line>:<doc>.md#<anchor>
    file_line=${hit%:*}
    ref=${hit##*:}
    doc=${ref%%.md#*}
    anchor=${ref#*.md#}
    checked=$((checked + 1))
    if [[ -z "${known["$doc#$anchor"]+x}" ]]; then
        bad_refs+="$file_line: $doc.md#$anchor names no anchor of docs/$doc.md"$'\n'
    fi
done < <(grep -noE '(harness-behaviour|decisions|architecture|operations(/[a-z-]+)?)\.md#[A-Za-z0-9_-]+' \
    "${ref_files[@]}" || true)

if [[ -n "$bad_refs" ]]; then
    echo "error: references to anchors that do not exist:" >&2
    printf '%s' "$bad_refs" >&2
    fail=1
fi

# (c) Relative links between Markdown files.
link_errors=$(
    python3 - <<'PY'
import pathlib, re, subprocess

def slug(heading):
    text = re.sub(r"^#+ +", "", heading).rstrip().rstrip("#").rstrip().lower()
    return re.sub(r"[^\w \-]", "", text).replace(" ", "-")

def anchors(path):
    found, fenced = set(re.findall(r'<a id="([^"]*)"', path.read_text())), False
    for line in path.read_text().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"^#{1,6} ", line):
            found.add(slug(line))
    return found

files = {pathlib.Path(f) for f in subprocess.check_output(["git", "ls-files", "*.md"], text=True).split()}
files |= set(pathlib.Path("docs/operations").glob("*.md"))
for md in sorted(files):
    if not md.exists():
        continue
    for number, line in enumerate(md.read_text().split("\n"), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (md.parent / path) if path else md
            if not linked.exists():
                print(f"{md}:{number}: {target} names no file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                print(f"{md}:{number}: {target} names no anchor of {linked}")
PY
)
if [[ -n "$link_errors" ]]; then
    echo "error: Markdown links to files or anchors that do not exist:" >&2
    echo "$link_errors" >&2
    fail=1
fi

if [[ $fail -ne 0 ]]; then
    exit 1
fi
echo "check-citations: ok — ${#rs_files[@]} Rust files free of shared-doc citations, $checked doc anchor references resolve"
