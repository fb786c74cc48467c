#!/usr/bin/env bash
# Checks that code and docs cite only documents inside the repository.
#
# Fails (exit 1, listing file:line) when
#   (a) a `*.rs` file outside target/ and fuzz/target/ cites a document outside the repository:
#       `§`, `contract C`, `brief §` or `style rule` outside a string or char literal (test data
#       that checks output for such markers stays allowed; a literal spanning lines is not
#       recognised as one);
#   (b) a reference `<doc>.md#<anchor>` in a `*.rs`, `*.md` or `*.sh` file, for <doc> one of
#       harness-behaviour, decisions, architecture and operations, names an anchor that
#       docs/<doc>.md does not have. An anchor exists when the doc has `<a id="X">` or a heading whose GitHub slug is X.
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
for doc in harness-behaviour decisions architecture operations; do
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
    doc=${doc##*/}
    anchor=${ref#*.md#}
    checked=$((checked + 1))
    if [[ -z "${known["$doc#$anchor"]+x}" ]]; then
        bad_refs+="$file_line: $doc.md#$anchor names no anchor of docs/$doc.md"$'\n'
    fi
done < <(grep -noE '(harness-behaviour|decisions|architecture|operations)\.md#[A-Za-z0-9_-]+' \
    "${ref_files[@]}" || true)

if [[ -n "$bad_refs" ]]; then
    echo "error: references to anchors that do not exist:" >&2
    printf '%s' "$bad_refs" >&2
    fail=1
fi

if [[ $fail -ne 0 ]]; then
    exit 1
fi
echo "check-citations: ok — ${#rs_files[@]} Rust files free of shared-doc citations, $checked doc anchor references resolve"
