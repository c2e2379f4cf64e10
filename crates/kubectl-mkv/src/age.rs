//! Ages as kubectl prints them (`45s`, `3m20s`, `5h12m`, `3d4h`), from a clock passed in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Milliseconds since the Unix epoch.
pub fn millis(t: &Time) -> i64 {
    t.0.as_millisecond()
}

/// How long ago `then_ms` was at `now_ms`, kubectl's way (a time in the future reads `0s`).
pub fn since(then_ms: i64, now_ms: i64) -> String {
    human((now_ms - then_ms).max(0) / 1000)
}

/// A duration in seconds, two units at most, coarser as it grows.
pub fn human(secs: i64) -> String {
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86_400);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => with_rest(m, "m", s % 60, "s"),
        s if s < 3 * 3600 => format!("{m}m"),
        s if s < 8 * 3600 => with_rest(h, "h", m % 60, "m"),
        s if s < 48 * 3600 => format!("{h}h"),
        s if s < 8 * 86_400 => with_rest(d, "d", h % 24, "h"),
        _ => format!("{d}d"),
    }
}

fn with_rest(big: i64, big_unit: &str, rest: i64, rest_unit: &str) -> String {
    if rest == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{rest}{rest_unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        for (secs, want) in [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (5 * 3600 + 12 * 60, "5h12m"),
            (30 * 3600, "30h"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (9 * 86_400, "9d"),
        ] {
            assert_eq!(human(secs), want, "{secs}");
        }
        assert_eq!(since(10_000, 5_000), "0s", "a time in the future");
        assert_eq!(since(0, 61_999), "61s");
    }
}
