//! `cargo xtask bench-ab DIR [--min-change PCT]`: the A/B table of a run of
//! `ab.sh`, which `cargo xtask bench-gpu --bundle DIR --against REV` writes
//! beside the working tree's benchmark and REV's (`gpu-bench-base`); variants
//! (other trees' `gpu-bench`, copied into the bundle as `gpu-bench-<LABEL>`)
//! join the run and the table as further sides.
//!
//! `ab.sh` runs the binaries alternately on one GPU, round after round, so
//! that clocks, temperature and the other tenants of the machine weigh on
//! all alike; each run writes `ab/<side>-<round>/bench.json` (sides `base`,
//! `new`, then the labels). A case's time here is its best over the rounds:
//! the median of a run is already robust to outliers within it, and the best
//! run is the one least disturbed from outside. Every side is compared with
//! `base`. Writes `DIR/ab.md` and prints it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::Result;
use crate::report::{field, l2_note, num, read_json, text};

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
    /// Each run's L2 flush (`flush_bytes`; 0 under `--warm`).
    flush_bytes: Vec<f64>,
}

impl Side {
    fn add(&mut self, path: &Path) -> Result<()> {
        let v = read_json(path)?;
        self.device = text(&v, "device", path)?;
        self.copy_gbs.push(num(field(&v, "copy", path)?, "gbs", path)?);
        self.flush_bytes.push(num(&v, "flush_bytes", path)?);
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

/// The variants' labels under `dir/ab` (`<label>-<round>`, other than
/// `base` and `new`), in name order.
fn variants(dir: &Path) -> Result<Vec<String>> {
    let ab = dir.join("ab");
    let entries = std::fs::read_dir(&ab).map_err(|e| format!("read {}: {e}", ab.display()))?;
    let labels: BTreeSet<String> = entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let (label, round) = name.rsplit_once('-')?;
            (round.parse::<u32>().is_ok() && label != "base" && label != "new").then(|| label.to_string())
        })
        .collect();
    Ok(labels.into_iter().collect())
}

pub fn ab(dir: &Path, min_change: f64) -> Result<()> {
    let base = read_side(dir, "base")?;
    let mut sides = vec![("new".to_string(), read_side(dir, "new")?)];
    for label in variants(dir)? {
        let side = read_side(dir, &label)?;
        sides.push((label, side));
    }
    let against = std::fs::read_to_string(dir.join(BASE_FILE)).unwrap_or_else(|_| "the baseline".into());
    let md = table(&base, &sides, against.trim(), min_change);
    let path = dir.join("ab.md");
    std::fs::write(&path, &md).map_err(|e| format!("write {}: {e}", path.display()))?;
    print!("{md}");
    println!("wrote {}", path.display());
    Ok(())
}

/// The Markdown report: cases in the order the baseline ran them (then the
/// other sides' own), each side's best time and its change against the
/// base; a summary per side. `sides` starts with `new`.
fn table(base: &Side, sides: &[(String, Side)], against: &str, min_change: f64) -> String {
    let ceilings = |s: &Side| s.copy_gbs.iter().map(|g| format!("{g:.0}")).collect::<Vec<_>>().join(", ");
    let labels: Vec<&str> = sides.iter().map(|(l, _)| l.as_str()).collect();
    let variants = if labels.len() > 1 { format!(" and variants {}", labels[1..].join(", ")) } else { String::new() };
    let mut runs: Vec<String> = std::iter::once(format!("{} base", base.rounds))
        .chain(sides.iter().map(|(l, s)| format!("{} {l}", s.rounds)))
        .collect();
    let last = runs.pop().unwrap_or_default();
    let side_ceilings: Vec<String> = sides.iter().map(|(l, s)| format!("{l} {}", ceilings(s))).collect();
    let flushes: BTreeSet<String> = std::iter::once(base)
        .chain(sides.iter().map(|(_, s)| s))
        .flat_map(|s| &s.flush_bytes)
        .map(|&b| l2_note(b))
        .collect();
    let l2 =
        if flushes.len() == 1 { flushes.into_iter().collect() } else { "L2 flushed in some runs only".to_string() };
    let mut md = format!(
        "# A/B on {}: {against} (base) against the working tree (new){variants}\n\n\
         Best of {} and {last} runs per case, run alternately by `ab.sh` (CUDA-graph replay, {l2}, \
         median of each run's replays); copy ceilings of the runs: base {} GB/s, {} GB/s.\n\n",
        sides[0].1.device,
        runs.join(", "),
        ceilings(base),
        side_ceilings.join(" GB/s, ")
    );
    let mut changes = vec![Vec::new(); sides.len()];
    let mut rows = String::new();
    let mut names: Vec<&String> = base.order.iter().collect();
    for (_, side) in sides {
        for name in &side.order {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let us = |t: Option<&f64>| t.map_or("–".to_string(), |t| format!("{t:.1}"));
    for name in names {
        let b = base.best.get(name);
        let mut cells = String::new();
        let mut listed = false;
        for ((_, side), changes) in sides.iter().zip(&mut changes) {
            let n = side.best.get(name);
            let change = b.zip(n).map(|(b, n)| 100.0 * (n / b - 1.0));
            if let Some(c) = change {
                changes.push(c);
            }
            listed |= change.is_none_or(|c| c.abs() >= min_change);
            let change = change.map_or("–".to_string(), |c| format!("{c:+.1} %"));
            cells.push_str(&format!(" {} | {change} |", us(n)));
        }
        if listed {
            rows.push_str(&format!("| {name} | {} |{cells}\n", us(b)));
        }
    }
    if min_change > 0.0 {
        md.push_str(&format!("Cases whose time changed by {min_change} % or more:\n\n"));
    }
    let heads: String = labels
        .iter()
        .map(|&l| if l == "new" { " new µs | change |".to_string() } else { format!(" {l} µs | {l} change |") })
        .collect();
    md.push_str(&format!("| case | base µs |{heads}\n| --- | ---: |{}\n", " ---: | ---: |".repeat(sides.len())));
    md.push_str(&rows);
    for (label, mut changes) in labels.iter().zip(changes) {
        changes.sort_by(f64::total_cmp);
        if let (Some(first), Some(last)) = (changes.first(), changes.last()) {
            let faster = changes.iter().filter(|&&c| c <= -2.0).count();
            let slower = changes.iter().filter(|&&c| c >= 2.0).count();
            let who = if *label == "new" { String::new() } else { format!("{label}: ") };
            md.push_str(&format!(
                "\n{who}{} case{} in both: {faster} faster by 2 % or more, {slower} slower by 2 % or more; \
                 median change {:+.1} %, range {first:+.1} % to {last:+.1} %.\n",
                changes.len(),
                if changes.len() == 1 { "" } else { "s" },
                changes[changes.len() / 2]
            ));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that `md` holds each of `parts`.
    fn assert_holds(md: &str, parts: &[&str]) {
        for part in parts {
            assert!(md.contains(part), "no {part:?} in:\n{md}");
        }
    }

    fn run(dir: &Path, side: &str, round: u32, copy: f64, cases: &[(&str, f64)]) {
        let cases: Vec<_> = cases.iter().map(|(name, us)| serde_json::json!({"case": name, "us": us})).collect();
        let json =
            serde_json::json!({"device": "GPU X", "copy": {"gbs": copy}, "flush_bytes": 536870912, "cases": cases});
        let run = dir.join("ab").join(format!("{side}-{round}"));
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("bench.json"), json.to_string()).unwrap();
    }

    /// The header says how the runs treated the L2: all flushed, all warm
    /// (`--warm`), or mixed.
    #[test]
    fn the_header_says_how_the_runs_treated_the_l2() {
        let side = |flush: &[f64]| Side {
            best: BTreeMap::from([("a".to_string(), 1.0)]),
            order: vec!["a".to_string()],
            rounds: flush.len(),
            device: "GPU X".into(),
            copy_gbs: vec![4000.0; flush.len()],
            flush_bytes: flush.to_vec(),
        };
        let header = |base: &[f64], new: &[f64]| table(&side(base), &[("new".to_string(), side(new))], "x", 0.0);
        let flushed = 536_870_912.0;
        assert_holds(&header(&[flushed], &[flushed]), &["L2 flushed (512 MiB memset) before each replay"]);
        assert_holds(&header(&[0.0, 0.0], &[0.0]), &["L2 left warm between replays (`--warm`)"]);
        assert_holds(&header(&[flushed], &[0.0]), &["L2 flushed in some runs only"]);
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
        let sides = vec![("new".to_string(), new)];
        let md = table(&base, &sides, "abc1234", 0.0);
        assert_holds(
            &md,
            &[
                "abc1234 (base)",
                "base 4200, 4210 GB/s, new 4205, 4190 GB/s",
                "| a | 9.0 | 9.4 | +5.0 % |",
                "| b | 100.0 | 90.0 | -10.0 % |",
                "| only base | 1.0 | – | – |",
                "| only new | – | 2.0 | – |",
                "2 cases in both: 1 faster by 2 % or more, 1 slower by 2 % or more",
            ],
        );
        // Only the large changes listed; the summary still counts all.
        let md = table(&base, &sides, "abc1234", 6.0);
        assert!(!md.contains("| a |") && md.contains("| b |") && md.contains("2 cases in both"), "{md}");
        ab(&dir, 0.0).unwrap();
        assert!(std::fs::read_to_string(dir.join("ab.md")).unwrap().contains("| b | 100.0 | 90.0 |"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_side(&dir, "base").is_err());
    }

    /// A variant copied into the bundle (`gpu-bench-v1`) is a third side, compared with the base.
    #[test]
    fn variants_are_further_sides() {
        let dir = std::env::temp_dir().join(format!("specdec-ab-variants-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run(&dir, "base", 1, 4200.0, &[("a", 10.0), ("b", 100.0)]);
        run(&dir, "new", 1, 4205.0, &[("a", 11.0), ("b", 100.0)]);
        for (round, a) in [(1, 8.5), (2, 8.0)] {
            run(&dir, "v1", round, 4201.0, &[("a", a), ("b", 101.0), ("only v1", 3.0)]);
        }
        std::fs::create_dir_all(dir.join("ab").join("not-a-round")).unwrap();
        assert_eq!(variants(&dir).unwrap(), ["v1"]);
        ab(&dir, 0.0).unwrap();
        let md = std::fs::read_to_string(dir.join("ab.md")).unwrap();
        assert_holds(
            &md,
            &[
                "(new) and variants v1",
                "Best of 1 base, 1 new and 2 v1 runs per case",
                "| case | base µs | new µs | change | v1 µs | v1 change |",
                "| a | 10.0 | 11.0 | +10.0 % | 8.0 | -20.0 % |",
                "| only v1 | – | – | – | 3.0 | – |",
                "\n2 cases in both: 0 faster by 2 % or more, 1 slower",
                "\nv1: 2 cases in both: 1 faster by 2 % or more, 0 slower",
            ],
        );
        // A row stays while any side changed by the threshold.
        let sides =
            vec![("new".to_string(), read_side(&dir, "new").unwrap()), ("v1".into(), read_side(&dir, "v1").unwrap())];
        let md = table(&read_side(&dir, "base").unwrap(), &sides, "x", 5.0);
        assert!(md.contains("| a |") && !md.contains("| b |"), "{md}");
        std::fs::remove_dir_all(&dir).unwrap();
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
