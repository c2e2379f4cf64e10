#!/usr/bin/env bash
# `make test`: every stage runs, whatever the stages before it did, and the run ends with a
# table of each stage's time, verdict and counts (hack/stages.sh), naming each that failed.
#
#   build     every target of the workspace, once (each later stage reuses it); meanwhile, in
#             the background, the control plane the e2e stages need (cached outside the
#             repository, so a no-op when warm)
#   unit      unit, property and simulation tests (the DST's 10,000 schedules over the cores)
#   fuzz      the metrics parser for FUZZ_SECONDS
#             (unit and fuzz need no cluster: they run beside the e2e stages, at the lowest CPU
#             priority, so they take the cores the e2e tests leave idle; their output is
#             printed whole when they end, after the e2e stages')
#   e2e       the e2e suite on simulated members (hack/test-e2e.sh, which builds helm and the
#             operator at the pinned commit of the upgrade test beside the first tests)
#   e2e-real  the disruptive, data-checked e2e tests again on real marekvs members, when
#             MAREKVS_REAL_BIN names a marekvs-server binary; otherwise each is reported
#             skipped, with the reason (a machine without the binary still passes)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
. "$here/stages.sh"

# The lane on real members: 5 -> 3 removing the chosen member; a replacement on the member's
# own volume and one on a fresh volume; a roll of every member; 5 -> 4 under a steady load
# through the Service, and with a client pinned to the leaver; the data check's negative control
# (a forced pod + PVC delete right after 160 MiB of writes loses keys, and the check names them); the upgrade from
# the pinned commit; `kubectl drain` of a node that runs 2 of 5 members, and one at replicationFactor (held, then done);
# a password rotation under a writing client, cut short by an operator restart, then a gated removal;
# a whole-cluster upgrade under load; a fast client on the leaver cut by its restart with writes
# unshipped, and a burst past the leaver's ring (gate v4).
REAL_LANE=(
  creates_members_then_scales_3_5_3_removing_the_chosen_member_first
  a_deleted_pod_returns_on_its_volume_and_a_deleted_pod_and_pvc_rejoin_fresh
  a_spec_change_restarts_one_member_at_a_time_behind_the_hand_off_gate
  a_scale_down_under_a_steady_load_completes_and_loses_nothing
  a_client_writing_to_the_leavers_pod_address_holds_the_removal_until_it_stops
  a_raw_pod_and_pvc_delete_seconds_after_writes_loses_keys_the_check_names
  an_upgrade_from_the_pinned_commit_keeps_members_and_keys
  a_node_drain_moves_its_members_off_one_at_a_time_and_completes
  a_node_drain_at_replication_factor_is_blocked_with_the_reason_then_completes
  a_password_rotation_sets_the_new_password_live_and_a_gated_removal_follows
  a_whole_cluster_upgrade_under_load_loses_nothing
  a_fast_client_on_the_leaver_cut_by_its_restart_loses_nothing
  a_burst_past_the_leavers_ring_loses_nothing
)

# Of those, the tests whose run on the simulator checks something the lane cannot: a fault
# its control API makes (the roll held while a member reports under-replication), a release
# its image reports (the whole-cluster upgrade's version change). They run in both stages.
# Where the lane runs, the e2e stage skips the others, each reported skipped with the reason
# (a test on real members proves what its run on the model would, and more); without the
# real server they run on the simulator as before.
ALSO_SIMULATED=(
  a_spec_change_restarts_one_member_at_a_time_behind_the_hand_off_gate
  a_whole_cluster_upgrade_under_load_loses_nothing
)
if [ -n "${MAREKVS_REAL_BIN:-}" ]; then
  MAREKVS_E2E_REAL_LANE_RUNS=$(printf '%s\n' "${REAL_LANE[@]}" | grep -vxF -f <(printf '%s\n' "${ALSO_SIMULATED[@]}") | paste -sd,)
  export MAREKVS_E2E_REAL_LANE_RUNS
fi

stages_begin build unit fuzz e2e e2e-real

prep_log=$(mktemp)
"$here/build-control-plane.sh" > "$prep_log" 2>&1 &
prep=$!

# The build stage also lists the e2e test binaries, so that the e2e stages run no cargo.
MAREKVS_E2E_BINS_FILE=$(mktemp)
export MAREKVS_E2E_BINS_FILE
build_and_list() { e2e_binaries > "$MAREKVS_E2E_BINS_FILE"; }
stage build build_and_list
beside_log=$(mktemp)
(
  renice -n 19 -p "$BASHPID" >/dev/null
  stage unit cargo test --no-fail-fast --workspace --exclude marekvs-e2e
  stage fuzz "$here/fuzz.sh" "${FUZZ_SECONDS:-30}"
) > "$beside_log" 2>&1 &
beside=$!

# The e2e stages need the control plane the background built; its failure fails them, with
# its log.
prep_rc=0
wait "$prep" || prep_rc=$?
prepared() {
  [ "$prep_rc" -eq 0 ] || { cat "$prep_log" >&2; log "preparing the e2e stages failed"; }
  return "$prep_rc"
}
e2e() { prepared && "$here/test-e2e.sh" "$@"; }
real_lane() {
  if [ -z "${MAREKVS_REAL_BIN:-}" ]; then
    local why=${MAREKVS_REAL_SKIP_REASON:-no real marekvs-server binary here (MAREKVS_REAL_BIN names one)}
    for t in "${REAL_LANE[@]}"; do echo "skipped $t: real-member lane: $why"; done
    echo "test result: ok. 0 passed; 0 failed; ${#REAL_LANE[@]} ignored; 0 measured; 0 filtered out"
    return 0
  fi
  # The negative control (local) runs alone: its loss needs demo-2 writing faster than it
  # ships, and beside two other tests it shipped everything.
  prepared && MAREKVS_BIN=$MAREKVS_REAL_BIN E2E_THREADS=${E2E_REAL_THREADS:-3} E2E_EXCLUSIVE=local \
    "$here/test-e2e.sh" "${REAL_LANE[@]}"
}
stage e2e e2e
stage e2e-real real_lane
wait "$beside" || true
cat "$beside_log"
rm -f "$prep_log" "$beside_log" "$MAREKVS_E2E_BINS_FILE"
stages_end
