#!/usr/bin/env bash
# Stages of a run (`make test`, `.ci/run`): each stage runs whatever the stages before it did,
# and the run ends with a table of every stage's wall time, verdict and test counts, naming each
# stage that failed or never ran. Source it; do not run it.
#
# The stages of one run share one log, MAREKVS_STAGE_LOG (tab-separated rows): the outermost
# script creates it and reports; a script it calls (.ci/run calls `make test`) adds to it.
#
#   stages_begin NAME...    plan these stages (creates the log unless one is given)
#   stage NAME CMD...       run CMD as stage NAME: output as it comes, then its row
#   stages_end              the table and the closing line when this script owns the log;
#                           returns 1 when any stage failed or never ran

stages_begin() {
  if [ -z "${MAREKVS_STAGE_LOG:-}" ]; then
    MAREKVS_STAGE_LOG=$(mktemp)
    export MAREKVS_STAGE_LOG
    STAGES_OWNER=1
    STAGES_START=$(date +%s)
  fi
  local name
  for name in "$@"; do printf 'plan\t%s\n' "$name" >> "$MAREKVS_STAGE_LOG"; done
  STAGES_MINE=("$@")
}

# The counts of libtest's "test result:" lines in a stage's output (the e2e runner and the
# real-member lane print them too): "passed failed skipped".
stage_counts() {
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
       END { printf "%d\t%d\t%d\n", p, f, s }' "$1"
}

stage() {
  local name=$1; shift
  local out start rc
  out=$(mktemp)
  start=$(date +%s)
  printf '\n===== stage %s: %s\n' "$name" "$*" >&2
  set +e
  "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  printf 'ran\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - start ))" "$(stage_counts "$out")" >> "$MAREKVS_STAGE_LOG"
  rm -f "$out"
}

# stage_record NAME RC SECS: a row for a step that is not run through `stage` (a callee that
# failed before it could plan its own stages).
stage_record() {
  printf 'plan\t%s\nran\t%s\t%s\t%s\t0\t0\t0\n' "$1" "$1" "$2" "$3" >> "$MAREKVS_STAGE_LOG"
}

# Whether every stage named ran and passed.
stages_ok() {
  local name
  for name in "$@"; do
    awk -F'\t' -v n="$name" '$1 == "ran" && $2 == n && $3 == 0 { ok = 1 } END { exit !ok }' "$MAREKVS_STAGE_LOG" || return 1
  done
}

stages_end() {
  local ok=0
  if [ -z "${STAGES_OWNER:-}" ]; then
    stages_ok "${STAGES_MINE[@]}" || ok=1
    return $ok
  fi
  # The owner answers for every stage planned in the log, its callees' too.
  # shellcheck disable=SC2046
  stages_ok $(awk -F'\t' '$1 == "plan" { print $2 }' "$MAREKVS_STAGE_LOG") || ok=1
  awk -F'\t' -v wall=$(( $(date +%s) - STAGES_START )) '
    $1 == "plan" { order[++n] = $2 }
    $1 == "ran"  { rc[$2] = $3; secs[$2] = $4; p[$2] = $5; f[$2] = $6; s[$2] = $7; ran[$2] = 1 }
    END {
      printf "\n%-12s %-12s %8s %7s %7s %8s\n", "stage", "result", "time", "passed", "failed", "skipped"
      for (i = 1; i <= n; i++) {
        st = order[i]
        if (!ran[st]) { printf "%-12s %-12s %8s\n", st, "NEVER RAN", "-"; bad = bad " " st " (never ran)"; continue }
        verdict = rc[st] == 0 ? "ok" : "FAILED (" rc[st] ")"
        if (rc[st] != 0) bad = bad " " st
        printf "%-12s %-12s %5dm%02ds %7d %7d %8d\n", st, verdict, secs[st] / 60, secs[st] % 60, p[st], f[st], s[st]
        total += secs[st]; P += p[st]; F += f[st]; S += s[st]
      }
      printf "%-12s %-12s %5dm%02ds %7d %7d %8d\n", "sum", "", total / 60, total % 60, P, F, S
      printf "%-12s %-12s %5dm%02ds\n", "wall", "", wall / 60, wall % 60
      if (bad != "") printf "stages failed or never run:%s\n", bad
      printf "%d passed, %d failed, %d skipped\n", P, F, S
    }' "$MAREKVS_STAGE_LOG"
  rm -f "$MAREKVS_STAGE_LOG"
  return $ok
}
