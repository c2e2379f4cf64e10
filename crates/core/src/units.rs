//! Kubernetes quantities as plain strings (`10Gi`, `500M`, `1.5Ki`).

/// Bytes of a storage quantity with a binary or decimal suffix; `None` if it does not parse.
pub fn quantity_bytes(q: &str) -> Option<u128> {
    let s = q.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        _ => return None,
    };
    Some((num * mult) as u128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse() {
        assert_eq!(quantity_bytes("10Gi"), Some(10 << 30));
        assert_eq!(quantity_bytes("1G"), Some(1_000_000_000));
        assert_eq!(quantity_bytes("512"), Some(512));
        assert_eq!(quantity_bytes("1.5Ki"), Some(1536));
        assert_eq!(quantity_bytes("bogus"), None);
        assert_eq!(quantity_bytes("10 gigs"), None);
    }
}
