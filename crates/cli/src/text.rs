//! Wording shared by messages and the demo's report: counts with their
//! plural, and floats in a short form.

/// `n` followed by `noun`, plural (`noun` + "s") unless `n` is 1: "1 row", "3 rows".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// `x` in a short form: plain decimals for magnitudes in `1e-4 .. 1e6` (and
/// 0, NaN, infinities), else scientific notation (`1e-40`, not 40 digits).
pub fn float(x: f32) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e6).contains(&x.abs()) { format!("{x}") } else { format!("{x:e}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_floats() {
        assert_eq!(count(1, "row"), "1 row");
        assert_eq!(count(0, "row"), "0 rows");
        assert_eq!(count(2, "call"), "2 calls");
        assert_eq!(float(0.8), "0.8");
        assert_eq!(float(-1.0), "-1");
        assert_eq!(float(0.0), "0");
        assert_eq!(float(1e-40), "1e-40");
        assert_eq!(float(f32::MAX), "3.4028235e38");
        assert_eq!(float(f32::NAN), "NaN");
        assert_eq!(float(f32::NEG_INFINITY), "-inf");
    }
}
