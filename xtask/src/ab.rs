//! `cargo xtask bench-ab DIR [--min-change PCT]`: the A/B table of a run of
//! `ab.sh`, which `cargo xtask bench-gpu --bundle DIR --against REV` writes
//! beside the working tree's benchmark and REV's (`gpu-bench-base`).
//!
//! `ab.sh` runs the two binaries alternately on one GPU, round after round, so
//! that clocks, temperature and the other tenants of the machine weigh on
//! both alike; each run writes `ab/{base,new}-<round>/bench.json`. A case's
//! time here is its best over the rounds: the median of a run is already
//! robust to outliers within it, and the best run is the one least disturbed
//! from outside. Writes `DIR/ab.md` and prints it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::Result;
use crate::report::{field, num, read_json, text};

/// The shell script of the bundle.
pub const AB_SH: &str = include_str!("ab.sh");
/// The baseline's binary in the bundle.
pub const BASE_BINARY: &str = "gpu-bench-base";
/// The file in the bundle naming the baseline's commit.
pub const BASE_FILE: &str = "base.txt";

/// Options: `DIR` and `--min-change PCT` (list only cases whose time changed by
/// at least PCT percent; the summary counts all).
pub fn parse(options: &[String]) -> Result<(PathBuf, f64)> {
    let mut dir = None;
    let mut min_change = 0.0;
    let mut iter = options.iter();
    while let Some(arg) = iter.next() {
        let value = if arg == "--min-change" {
            Some(iter.next().ok_or("`--min-change` needs a percentage")?.as_str())
        } else {
            arg.strip_prefix("--min-change=")
        };
        if let Some(value) = value {
            min_change = value
                .parse::<f64>()
                .ok()
                .filter(|p| p.is_finite() && *p >= 0.0)
                .ok_or_else(|| format!("`--min-change` takes a percentage >= 0, not `{value}`"))?;
        } else if arg.starts_with('-') {
            return Err(format!("`bench-ab` takes `DIR [--min-change PCT]`, not `{arg}`"));
        } else if dir.replace(PathBuf::from(arg)).is_some() {
            return Err(format!("`bench-ab` takes one directory, got a second: `{arg}`"));
        }
    }
    Ok((dir.ok_or("`bench-ab` needs the directory holding ab/ (the OUT of ab.sh)")?, min_change))
}

/// One side's runs: per case, the best time over the rounds; the device and
/// the copy ceilings the runs measured.
#[derive(Debug, Default)]
struct Side {
    best: BTreeMap<String, f64>,
    order: Vec<String>,
    rounds: usize,
    device: String,
    copy_gbs: Vec<f64>,
}

impl Side {
    fn add(&mut self, path: &Path) -> Result<()> {
        let v = read_json(path)?;
        self.device = text(&v, "device", path)?;
        self.copy_gbs.push(num(field(&v, "copy", path)?, "gbs", path)?);
        let cases =
            field(&v, "cases", path)?.as_array().ok_or_else(|| format!("{}: `cases` is not a list", path.display()))?;
        for c in cases {
            let (name, us) = (text(c, "case", path)?, num(c, "us", path)?);
            match self.best.get_mut(&name) {
                Some(best) => *best = best.min(us),
                None => {
                    self.order.push(name.clone());
                    self.best.insert(name, us);
                }
            }
        }
        self.rounds += 1;
        Ok(())
    }
}

/// Reads `dir/ab/<side>-<round>/bench.json` for every round present.
fn read_side(dir: &Path, side: &str) -> Result<Side> {
    let ab = dir.join("ab");
    let mut rounds: Vec<(u32, PathBuf)> = std::fs::read_dir(&ab)
        .map_err(|e| format!("read {}: {e} (run ab.sh with OUT={} first)", ab.display(), dir.display()))?
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let round = path.file_name()?.to_str()?.strip_prefix(side)?.strip_prefix('-')?.parse().ok()?;
            Some((round, path.join("bench.json")))
        })
        .collect();
    rounds.sort();
    let mut result = Side::default();
    for (_, path) in rounds.iter().filter(|(_, path)| path.is_file()) {
        result.add(path)?;
    }
    if result.rounds == 0 {
        return Err(format!("no {side}-<round>/bench.json under {}: did ab.sh run?", ab.display()));
    }
    Ok(result)
}

pub fn ab(dir: &Path, min_change: f64) -> Result<()> {
    let (base, new) = (read_side(dir, "base")?, read_side(dir, "new")?);
    let against = std::fs::read_to_string(dir.join(BASE_FILE)).unwrap_or_else(|_| "the baseline".into());
    let md = table(&base, &new, against.trim(), min_change);
    let path = dir.join("ab.md");
    std::fs::write(&path, &md).map_err(|e| format!("write {}: {e}", path.display()))?;
    print!("{md}");
    println!("wrote {}", path.display());
    Ok(())
}

/// The Markdown report: cases in the order the baseline ran them (then the
/// new side's own), each side's best time, and the change.
fn table(base: &Side, new: &Side, against: &str, min_change: f64) -> String {
    let ceilings = |s: &Side| s.copy_gbs.iter().map(|g| format!("{g:.0}")).collect::<Vec<_>>().join(", ");
    let mut md = format!(
        "# A/B on {}: {against} (base) against the working tree (new)\n\n\
         Best of {} base and {} new runs per case, run alternately by `ab.sh` (CUDA-graph replay, L2 flushed, \
         median of each run's replays); copy ceilings of the runs: base {} GB/s, new {} GB/s.\n\n",
        new.device,
        base.rounds,
        new.rounds,
        ceilings(base),
        ceilings(new)
    );
    let mut changes = Vec::new();
    let mut rows = String::new();
    let names = base.order.iter().chain(new.order.iter().filter(|n| !base.best.contains_key(*n)));
    for name in names {
        let (b, n) = (base.best.get(name), new.best.get(name));
        let change = match (b, n) {
            (Some(b), Some(n)) => {
                let change = 100.0 * (n / b - 1.0);
                changes.push(change);
                Some(change)
            }
            _ => None,
        };
        if change.is_some_and(|c| c.abs() < min_change) {
            continue;
        }
        let us = |t: Option<&f64>| t.map_or("–".to_string(), |t| format!("{t:.1}"));
        let change = change.map_or("–".to_string(), |c| format!("{c:+.1} %"));
        rows.push_str(&format!("| {name} | {} | {} | {change} |\n", us(b), us(n)));
    }
    if min_change > 0.0 {
        md.push_str(&format!("Cases whose time changed by {min_change} % or more:\n\n"));
    }
    md.push_str("| case | base µs | new µs | change |\n| --- | ---: | ---: | ---: |\n");
    md.push_str(&rows);
    changes.sort_by(f64::total_cmp);
    if let (Some(first), Some(last)) = (changes.first(), changes.last()) {
        let faster = changes.iter().filter(|&&c| c <= -2.0).count();
        let slower = changes.iter().filter(|&&c| c >= 2.0).count();
        md.push_str(&format!(
            "\n{} case{} in both: {faster} faster by 2 % or more, {slower} slower by 2 % or more; \
             median change {:+.1} %, range {first:+.1} % to {last:+.1} %.\n",
            changes.len(),
            if changes.len() == 1 { "" } else { "s" },
            changes[changes.len() / 2]
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, side: &str, round: u32, copy: f64, cases: &[(&str, f64)]) {
        let cases: Vec<_> = cases.iter().map(|(name, us)| serde_json::json!({"case": name, "us": us})).collect();
        let json = serde_json::json!({"device": "GPU X", "copy": {"gbs": copy}, "cases": cases});
        let run = dir.join("ab").join(format!("{side}-{round}"));
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("bench.json"), json.to_string()).unwrap();
    }

    #[test]
    fn best_of_the_rounds_and_the_change() {
        let dir = std::env::temp_dir().join(format!("specdec-ab-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run(&dir, "base", 1, 4200.0, &[("a", 10.0), ("b", 100.0), ("only base", 1.0)]);
        run(&dir, "base", 2, 4210.0, &[("a", 9.0), ("b", 101.0)]);
        run(&dir, "new", 1, 4205.0, &[("a", 9.9), ("b", 90.0), ("only new", 2.0)]);
        run(&dir, "new", 2, 4190.0, &[("a", 9.45), ("b", 95.0)]);
        std::fs::write(dir.join(BASE_FILE), "abc1234\n").unwrap();
        let (base, new) = (read_side(&dir, "base").unwrap(), read_side(&dir, "new").unwrap());
        assert_eq!((base.rounds, new.rounds), (2, 2));
        let md = table(&base, &new, "abc1234", 0.0);
        assert!(md.contains("abc1234 (base)"), "{md}");
        assert!(md.contains("base 4200, 4210 GB/s, new 4205, 4190 GB/s"), "{md}");
        assert!(md.contains("| a | 9.0 | 9.4 | +5.0 % |"), "{md}");
        assert!(md.contains("| b | 100.0 | 90.0 | -10.0 % |"), "{md}");
        assert!(md.contains("| only base | 1.0 | – | – |"), "{md}");
        assert!(md.contains("| only new | – | 2.0 | – |"), "{md}");
        assert!(md.contains("2 cases in both: 1 faster by 2 % or more, 1 slower by 2 % or more"), "{md}");
        // Only the large changes listed; the summary still counts all.
        let md = table(&base, &new, "abc1234", 6.0);
        assert!(!md.contains("| a |") && md.contains("| b |") && md.contains("2 cases in both"), "{md}");
        ab(&dir, 0.0).unwrap();
        assert!(std::fs::read_to_string(dir.join("ab.md")).unwrap().contains("| b | 100.0 | 90.0 |"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_side(&dir, "base").is_err());
    }

    #[test]
    fn options() {
        let parse = |args: &[&str]| parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(parse(&["d"]), Ok((PathBuf::from("d"), 0.0)));
        assert_eq!(parse(&["d", "--min-change", "2.5"]), Ok((PathBuf::from("d"), 2.5)));
        assert_eq!(parse(&["--min-change=1", "d"]), Ok((PathBuf::from("d"), 1.0)));
        assert!(parse(&[]).is_err());
        assert!(parse(&["d", "e"]).is_err());
        assert!(parse(&["d", "--min-change", "-1"]).is_err());
        assert!(parse(&["d", "--min-change"]).is_err());
        assert!(parse(&["d", "--rounds", "2"]).is_err());
    }
}
