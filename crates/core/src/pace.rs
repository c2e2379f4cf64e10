//! How soon a cluster is looked at again after a pass, or after a pass that failed.

use crate::types::{Decision, Memory, Millis};

/// A pass that recorded a new step of a removal or a restart acts on it at once (the next pass
/// carries it out); otherwise the decision's own pace holds. Never sooner than 50 ms.
pub fn next_look_ms(before: &Memory, d: &Decision) -> Millis {
    let removal_step = |m: &Memory| m.removal().map(|r| r.step);
    let roll_step = |m: &Memory| m.roll().map(|r| (r.ordinal, r.step));
    let stepped = (d.memory.removal().is_some() && removal_step(&d.memory) != removal_step(before))
        || (d.memory.roll().is_some() && roll_step(&d.memory) != roll_step(before));
    if stepped { 50 } else { d.requeue_ms.max(50) }
}

/// How often a pass records itself in status (`lastPassTime`) while nothing else there
/// changes: a reader can then tell a quiet cluster from one that no operator acts on, for one
/// status write a minute.
pub const STATUS_HEARTBEAT_MS: Millis = 60_000;

/// Whether a pass whose status is otherwise unchanged writes it anyway, to say that it ran:
/// none recorded yet, or the last one [`STATUS_HEARTBEAT_MS`] or more away. Away either way:
/// a pass recorded by a replica whose clock runs ahead is not trusted to be recent.
pub fn heartbeat_due(last_pass: Option<Millis>, now: Millis) -> bool {
    last_pass.is_none_or(|t| now.abs_diff(t) >= STATUS_HEARTBEAT_MS as u64)
}

/// The wait before the first retry of a pass that failed.
pub const ERROR_RETRY_FIRST_MS: Millis = 1_000;
/// The longest wait between retries of a pass that keeps failing.
pub const ERROR_RETRY_CAP_MS: Millis = 5 * 60 * 1_000;

/// The wait before retrying a pass that has now failed `failures` times in a row (1: the first
/// failure): doubling from [`ERROR_RETRY_FIRST_MS`] up to [`ERROR_RETRY_CAP_MS`], then cut by
/// up to half by `jitter` (in `[0, 1)`), so that clusters failing together (an API server
/// refusing every write) do not all retry in step, nor every few seconds for ever.
pub fn error_retry_ms(failures: u32, jitter: f64) -> Millis {
    let doublings = failures.saturating_sub(1).min(30);
    let full = ERROR_RETRY_FIRST_MS
        .saturating_mul(1 << doublings)
        .min(ERROR_RETRY_CAP_MS);
    let cut = (full as f64 * jitter.clamp(0.0, 1.0) / 2.0) as Millis;
    full - cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_pass_records_itself_once_a_minute_and_when_none_is_recorded() {
        let now = 10 * 60_000;
        assert!(heartbeat_due(None, now), "no pass recorded yet");
        assert!(!heartbeat_due(Some(now), now));
        assert!(!heartbeat_due(Some(now - 59_999), now));
        assert!(heartbeat_due(Some(now - 60_000), now));
        assert!(
            !heartbeat_due(Some(now + 59_999), now),
            "a clock a little ahead"
        );
        assert!(
            heartbeat_due(Some(now + 60_000), now),
            "a pass recorded a minute in the future"
        );
    }

    #[test]
    fn failed_passes_back_off_exponentially_up_to_the_cap_with_jitter_below_the_wait() {
        let waits: Vec<Millis> = (1..=12).map(|n| error_retry_ms(n, 0.0)).collect();
        assert_eq!(
            waits,
            [
                1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000,
                300_000, 300_000
            ]
        );
        assert_eq!(
            error_retry_ms(0, 0.0),
            ERROR_RETRY_FIRST_MS,
            "no failure counted yet"
        );
        assert_eq!(
            error_retry_ms(u32::MAX, 0.0),
            ERROR_RETRY_CAP_MS,
            "no overflow"
        );
        for n in [1, 5, 40] {
            let full = error_retry_ms(n, 0.0);
            assert_eq!(error_retry_ms(n, 0.5), full - full / 4);
            let least = error_retry_ms(n, 0.999_999);
            assert!(
                least > full / 2 - 1 && least < full,
                "{n}: {least} of {full}"
            );
            // Out-of-range jitter is clamped, never a longer wait or a negative one.
            assert_eq!(error_retry_ms(n, -1.0), full);
            assert_eq!(error_retry_ms(n, 7.0), full / 2);
        }
    }
}
