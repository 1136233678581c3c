//! `cargo xtask bench-report DIR [--results DIR] [--previous FILE]`: join the
//! GPU benchmark's `bench.json` and the PyTorch baseline's `torch.json` (both
//! in DIR) into `benches/results/<date>-<gpu>.md` (a table per operation:
//! case, specdec µs, % of copy, the memory-floor target and the time over it,
//! with `--previous` the time over the same case's time in an earlier run's
//! `bench.json`, torch µs, speed-up) and `<date>-<gpu>.svg` (achieved
//! bandwidth against batch per kernel path, with the copy bandwidth as the
//! ceiling), and copy the two JSON files beside them
//! (`<date>-<gpu>.bench.json`, `.torch.json`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::Value;

use crate::Result;

/// Where reports go, relative to the workspace root.
pub const RESULTS: &str = "benches/results";

/// One case of `bench.json`.
#[derive(Debug, Clone)]
struct Case {
    name: String,
    op: String,
    mode: String,
    logits_dtype: String,
    input: String,
    vocab: u64,
    rows: u64,
    requests: Option<u64>,
    max_drafts: Option<u64>,
    latency: bool,
    us: f64,
    bytes: f64,
    gbs: f64,
    reps: u64,
    /// Whether it is a filtered case or the unfiltered call beside them
    /// (`filter` given; left out of the plots).
    filter_case: bool,
    /// A filtered case's unfiltered call's µs, measured beside it.
    unfiltered_us: Option<f64>,
    /// Whether it asks for outputs beside its tokens (`plain_case` given;
    /// left out of the plots: its plain call is in them).
    outputs_case: bool,
    /// An outputs case's plain call's µs, measured beside it.
    plain_us: Option<f64>,
}

impl Case {
    /// The batch the plots put on the x axis: rows for sampling, requests for verification.
    fn batch(&self) -> u64 {
        self.requests.unwrap_or(self.rows)
    }
}

struct Bench {
    device: String,
    unix_time: u64,
    wall_s: f64,
    reps: u64,
    reps_long: u64,
    long_us: f64,
    /// Bytes of the L2 flush before each replay; 0 for a `--warm` run.
    flush_bytes: f64,
    temperature: f64,
    copy_gbs: f64,
    cases: Vec<Case>,
    /// Host time per call (µs) of the `host` cases by name: without and with
    /// cudarc's event tracking (`bench.json`s before them have none).
    host: BTreeMap<String, (Option<f64>, Option<f64>)>,
}

struct TorchCase {
    us: f64,
    method: String,
    variant: String,
}

struct Torch {
    device: String,
    version: String,
    cuda: String,
    quick: bool,
    /// The timing's floor, as the baseline measured it: a graph of one tiny
    /// kernel, and of two dependent ones (µs).
    floor: Option<(f64, f64)>,
    cases: HashMap<String, TorchCase>,
}

/// `bench-report` options.
#[derive(Debug, PartialEq)]
pub struct Options {
    /// The directory holding bench.json (and torch.json).
    pub dir: PathBuf,
    /// Where the report goes (`--results DIR`; default [`RESULTS`]).
    pub results: Option<PathBuf>,
    /// An earlier run's bench.json to compare each case's time with
    /// (`--previous FILE`); none unless given.
    pub previous: Option<PathBuf>,
}

/// Options: `DIR`, `--results DIR` and `--previous FILE` (each also as `--name=VALUE`).
pub fn parse(options: &[String]) -> Result<Options> {
    let mut dir = None;
    let mut results = None;
    let mut previous = None;
    let mut iter = options.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str, what: &str| -> Result<Option<PathBuf>> {
            if arg == name {
                return iter.next().map(|v| Some(PathBuf::from(v))).ok_or_else(|| format!("`{name}` needs {what}"));
            }
            Ok(arg.strip_prefix(name).and_then(|v| v.strip_prefix('=')).map(PathBuf::from))
        };
        if let Some(path) = value("--results", "a directory")? {
            results = Some(path);
        } else if let Some(path) = value("--previous", "a bench.json file")? {
            previous = Some(path);
        } else if arg.starts_with('-') {
            return Err(format!("`bench-report` takes `DIR [--results DIR] [--previous FILE]`, not `{arg}`"));
        } else if dir.replace(PathBuf::from(arg)).is_some() {
            return Err(format!("`bench-report` takes one directory, got a second: `{arg}`"));
        }
    }
    let dir = dir.ok_or("`bench-report` needs the directory holding bench.json (and torch.json)")?;
    Ok(Options { dir, results, previous })
}

/// Writes the report of the JSON files in `dir` into `results`, with no previous run.
pub fn report(dir: &Path, results: &Path) -> Result<()> {
    report_against(dir, results, None)
}

/// Writes the report of the JSON files in `dir` into `results`; with
/// `previous` (an earlier run's bench.json), each case's time over its time there.
pub fn report_against(dir: &Path, results: &Path, previous: Option<&Path>) -> Result<()> {
    let bench_path = dir.join("bench.json");
    let bench = read_bench(&bench_path)?;
    let previous = previous.map(read_previous).transpose()?;
    let torch_path = dir.join("torch.json");
    let torch = if torch_path.is_file() {
        Some(read_torch(&torch_path)?)
    } else {
        println!("note: no {}: the report has no PyTorch column", torch_path.display());
        None
    };

    let stem = format!("{}-{}", date(bench.unix_time), slug(&bench.device));
    std::fs::create_dir_all(results).map_err(|e| format!("mkdir {}: {e}", results.display()))?;
    let md_path = results.join(format!("{stem}.md"));
    let svg_path = results.join(format!("{stem}.svg"));
    let md = markdown(&bench, torch.as_ref(), previous.as_ref(), &format!("{stem}.svg"));
    std::fs::write(&md_path, md).map_err(|e| format!("write {}: {e}", md_path.display()))?;
    plot(&bench, torch.as_ref(), &svg_path)?;
    let copy = |from: &Path, to: PathBuf| {
        std::fs::copy(from, &to).map_err(|e| format!("cp {} {}: {e}", from.display(), to.display()))?;
        println!("wrote {}", to.display());
        Ok::<_, String>(())
    };
    copy(&bench_path, results.join(format!("{stem}.bench.json")))?;
    if torch.is_some() {
        copy(&torch_path, results.join(format!("{stem}.torch.json")))?;
    }
    println!("wrote {}", md_path.display());
    println!("wrote {}", svg_path.display());
    println!("{}", target_summary(&bench.cases, bench.copy_gbs).line());
    Ok(())
}

/// The memory-floor target (issue 26): a call moving `bytes` is within
/// reach of the floor when its time is at most
/// `max(bytes / (TARGET_FRACTION × copy), bytes / copy + TARGET_SLACK_US)`,
/// with `copy` the copy bandwidth measured in the same run.
const TARGET_FRACTION: f64 = 0.85;
const TARGET_SLACK_US: f64 = 10.0;

/// The rule, as the report states it.
fn target_rule() -> String {
    format!("time ≤ max(bytes / ({TARGET_FRACTION} × copy bandwidth), bytes / copy bandwidth + {TARGET_SLACK_US} µs)")
}

/// The target time (µs) of a call moving `bytes` at a copy bandwidth of `copy_gbs` GB/s.
fn target_us(bytes: f64, copy_gbs: f64) -> f64 {
    let copy_us = bytes / (copy_gbs * 1e3);
    (copy_us / TARGET_FRACTION).max(copy_us + TARGET_SLACK_US)
}

/// A case's time over its target: at most 1 meets it.
fn target_ratio(c: &Case, copy_gbs: f64) -> f64 {
    c.us / target_us(c.bytes, copy_gbs)
}

/// ✓ for a ratio that meets the target (≤ 1), else ✗.
fn mark(ratio: f64) -> &'static str {
    if ratio <= 1.0 { "✓" } else { "✗" }
}

/// The median of `values` (the mean of the middle two for an even count); `None` for none.
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// How a run's cases stand against the memory-floor target.
#[derive(Debug, PartialEq)]
struct TargetSummary<'a> {
    /// Cases whose ratio is at most 1.
    met: usize,
    total: usize,
    /// The case with the largest ratio (the first of equals), and that ratio.
    worst: Option<(&'a str, f64)>,
    median: Option<f64>,
}

/// The filtered cases (and the unfiltered calls beside them) and the
/// outputs cases are left out: the target is the plain calls' floor.
fn target_summary(cases: &[Case], copy_gbs: f64) -> TargetSummary<'_> {
    let cases: Vec<&Case> = cases.iter().filter(|c| !c.filter_case && !c.outputs_case).collect();
    let ratios: Vec<f64> = cases.iter().map(|c| target_ratio(c, copy_gbs)).collect();
    let mut worst: Option<(&str, f64)> = None;
    for (c, &r) in cases.iter().zip(&ratios) {
        if worst.is_none_or(|(_, w)| r > w) {
            worst = Some((c.name.as_str(), r));
        }
    }
    TargetSummary {
        met: ratios.iter().filter(|&&r| r <= 1.0).count(),
        total: cases.len(),
        worst,
        median: median(&ratios),
    }
}

impl TargetSummary<'_> {
    /// The summary line of the report (and of the command's output).
    fn line(&self) -> String {
        let mut line = format!("Memory-floor target: {} / {} cases meet it", self.met, self.total);
        if let (Some((case, worst)), Some(median)) = (self.worst, self.median) {
            write!(line, "; worst time / target {worst:.2} ({case}); median {median:.2}").unwrap();
        }
        line.push('.');
        line
    }
}

/// The earlier run a report compares with (`--previous`).
struct Previous {
    /// The file's name, as the report cites it.
    file: String,
    device: String,
    unix_time: u64,
    /// Each case's time (µs) by name.
    us: HashMap<String, f64>,
}

fn read_previous(path: &Path) -> Result<Previous> {
    let bench = read_bench(path)?;
    let file = path.file_name().map_or_else(|| path.display().to_string(), |f| f.to_string_lossy().into_owned());
    Ok(Previous {
        file,
        device: bench.device,
        unix_time: bench.unix_time,
        us: bench.cases.into_iter().map(|c| (c.name, c.us)).collect(),
    })
}

impl Previous {
    /// A case's time over its time in the previous run, matched by case
    /// name; `None` where that run has no such case.
    fn ratio(&self, c: &Case) -> Option<f64> {
        self.us.get(&c.name).map(|&before| c.us / before)
    }

    /// The table cell of [`Previous::ratio`]: "—" for a case the previous run lacks.
    fn cell(&self, c: &Case) -> String {
        self.ratio(c).map_or("—".to_string(), |r| format!("{r:.2}"))
    }
}

/// How a benchmark run treated the L2 between replays, from its
/// `flush_bytes` (0: a `--warm` run, whose small calls find their code and
/// data in the L2).
pub(crate) fn l2_note(flush_bytes: f64) -> String {
    if flush_bytes > 0.0 {
        format!("L2 flushed ({:.0} MiB memset) before each replay", flush_bytes / f64::from(1 << 20))
    } else {
        "L2 left warm between replays (`--warm`)".to_string()
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", path.display()))
}

pub(crate) fn field<'a>(v: &'a Value, key: &str, path: &Path) -> Result<&'a Value> {
    match v.get(key) {
        Some(x) if !x.is_null() => Ok(x),
        _ => Err(format!("{}: `{key}` is missing in {}", path.display(), short(v))),
    }
}

pub(crate) fn num(v: &Value, key: &str, path: &Path) -> Result<f64> {
    field(v, key, path)?.as_f64().ok_or_else(|| format!("{}: `{key}` is not a number in {}", path.display(), short(v)))
}

pub(crate) fn text(v: &Value, key: &str, path: &Path) -> Result<String> {
    field(v, key, path)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{}: `{key}` is not a string in {}", path.display(), short(v)))
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 { format!("{}…", &s[..s.floor_char_boundary(120)]) } else { s }
}

fn read_bench(path: &Path) -> Result<Bench> {
    let v = read_json(path)?;
    let mut cases = Vec::new();
    for c in field(&v, "cases", path)?.as_array().ok_or_else(|| format!("{}: `cases` is not a list", path.display()))? {
        cases.push(Case {
            name: text(c, "case", path)?,
            op: text(c, "op", path)?,
            mode: text(c, "mode", path)?,
            logits_dtype: text(c, "logits_dtype", path)?,
            input: text(c, "input", path)?,
            vocab: num(c, "vocab", path)? as u64,
            rows: num(c, "rows", path)? as u64,
            requests: c.get("requests").and_then(Value::as_u64),
            max_drafts: c.get("max_drafts").and_then(Value::as_u64),
            latency: c.get("latency").and_then(Value::as_bool).unwrap_or(false),
            us: num(c, "us", path)?,
            bytes: num(c, "bytes", path)?,
            gbs: num(c, "gbs", path)?,
            reps: num(c, "reps", path)? as u64,
            filter_case: c.get("filter").is_some_and(|f| !f.is_null()),
            unfiltered_us: c.get("unfiltered_us").and_then(Value::as_f64),
            outputs_case: c.get("plain_case").is_some_and(|p| !p.is_null()),
            plain_us: c.get("plain_us").and_then(Value::as_f64),
        });
    }
    let mut host: BTreeMap<String, (Option<f64>, Option<f64>)> = BTreeMap::new();
    if let Some(h) = v.get("host") {
        for c in h.as_array().ok_or_else(|| format!("{}: `host` is not a list", path.display()))? {
            let tracking = field(c, "event_tracking", path)?
                .as_bool()
                .ok_or_else(|| format!("{}: `event_tracking` is not a boolean in {}", path.display(), short(c)))?;
            let entry = host.entry(text(c, "case", path)?).or_default();
            *if tracking { &mut entry.1 } else { &mut entry.0 } = Some(num(c, "us", path)?);
        }
    }
    Ok(Bench {
        device: text(&v, "device", path)?,
        unix_time: num(&v, "unix_time", path)? as u64,
        wall_s: num(&v, "wall_s", path)?,
        reps: num(&v, "reps", path)? as u64,
        reps_long: num(&v, "reps_long", path)? as u64,
        long_us: num(&v, "long_us", path)?,
        flush_bytes: num(&v, "flush_bytes", path)?,
        temperature: num(&v, "temperature", path)?,
        copy_gbs: num(field(&v, "copy", path)?, "gbs", path)?,
        cases,
        host,
    })
}

fn read_torch(path: &Path) -> Result<Torch> {
    let v = read_json(path)?;
    let mut cases = HashMap::new();
    for c in field(&v, "cases", path)?.as_array().ok_or_else(|| format!("{}: `cases` is not a list", path.display()))? {
        cases.insert(
            text(c, "case", path)?,
            TorchCase { us: num(c, "us", path)?, method: text(c, "method", path)?, variant: text(c, "variant", path)? },
        );
    }
    Ok(Torch {
        device: text(&v, "device", path)?,
        version: text(&v, "torch", path)?,
        cuda: v.get("cuda").and_then(Value::as_str).unwrap_or("?").to_string(),
        quick: v.get("quick").and_then(Value::as_bool).unwrap_or(false),
        floor: match v.get("floor") {
            Some(f) => Some((num(f, "one_kernel_us", path)?, num(f, "two_kernels_us", path)?)),
            None => None,
        },
        cases,
    })
}

/// The report's line on the floor of its timing.
fn floor_line(one: f64, two: f64) -> String {
    format!(
        "- Floor of this timing, measured by the baseline in its run: a CUDA graph of one tiny kernel replays in \
         {one:.1} µs, of two dependent tiny kernels in {two:.1} µs (events, graph launch, a kernel's start and end); \
         no call of one (two) launches can take less."
    )
}

/// `YYYY-MM-DD` (UTC) of a Unix time.
fn date(unix_time: u64) -> String {
    // Howard Hinnant's days-to-civil algorithm.
    let z = (unix_time / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// "NVIDIA H200 (sm_90)" → "nvidia-h200".
fn slug(device: &str) -> String {
    let name = device.split(" (").next().unwrap_or(device);
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "gpu".to_string() } else { out }
}

fn markdown(bench: &Bench, torch: Option<&Torch>, previous: Option<&Previous>, svg: &str) -> String {
    let mut md = format!("# specdec vs PyTorch: {}, {}\n\n", bench.device, date(bench.unix_time));
    let copy = bench.copy_gbs;
    writeln!(
        md,
        "- Ceiling: device-to-device copy, **{copy:.0} GB/s** (2 GiB, reads + writes), measured in the same run."
    )
    .unwrap();
    writeln!(
        md,
        "- specdec (`benches/gpu.rs`): GPU time of one call under CUDA-graph replay, {}, median of {} replays \
         ({} for a case whose first replay took over {:.0} µs); the run took {:.0} s.",
        l2_note(bench.flush_bytes),
        bench.reps,
        bench.reps_long,
        bench.long_us,
        bench.wall_s
    )
    .unwrap();
    match torch {
        Some(t) => {
            let eager = t.cases.values().filter(|c| c.method != "graph").count();
            writeln!(
                md,
                "- PyTorch {} (CUDA {}) on {} (`benches/torch_baseline.py`): the same jobs written with torch ops, \
                 timed the same way; {eager} cases could not be captured in a CUDA graph and were timed as eager \
                 calls (marked *eager*). Random sampling: the faster of Gumbel-max \
                 (`argmax(logits/T − log(−log(rand)))`) and `multinomial(softmax(logits/T))`.{}",
                t.version,
                t.cuda,
                t.device,
                if t.quick { " Run with `--quick`: a subset of the cases." } else { "" }
            )
            .unwrap();
            if let Some((one, two)) = t.floor {
                writeln!(md, "{}", floor_line(one, two)).unwrap();
            }
            if slug(&t.device) != slug(&bench.device) {
                writeln!(md, "- **Warning**: the two runs were on different GPUs ({} vs {}).", bench.device, t.device)
                    .unwrap();
            }
        }
        None => writeln!(md, "- No PyTorch baseline (no torch.json beside bench.json).").unwrap(),
    }
    writeln!(
        md,
        "- % of copy: the fewest bytes a call must move (one read of every target row and every draft row used; \
         + the draft-logits write when sampling with draft logits; + one re-read of one row per request when \
         verifying, not greedy) over its time, against the copy bandwidth. Speed-up: torch µs / specdec µs."
    )
    .unwrap();
    writeln!(
        md,
        "- Memory-floor target (issue 26): {}, with a case's fewest bytes (as in % of copy) and the copy \
         bandwidth above. µs / target: specdec µs over the target; met: ✓ where that is at most 1, ✗ where over.",
        target_rule()
    )
    .unwrap();
    writeln!(md, "- **{}**", target_summary(&bench.cases, copy).line()).unwrap();
    if let Some(p) = previous {
        let ratios: Vec<f64> = bench.cases.iter().filter_map(|c| p.ratio(c)).collect();
        write!(
            md,
            "- µs / previous: specdec µs over the same case's µs in `{}` ({}, {}), matched by case name; \
             — where that run has no such case ({} of {} cases matched",
            p.file,
            p.device,
            date(p.unix_time),
            ratios.len(),
            bench.cases.len()
        )
        .unwrap();
        if let Some(m) = median(&ratios) {
            write!(md, ", median {m:.2}").unwrap();
        }
        md.push_str(").\n");
        if slug(&p.device) != slug(&bench.device) {
            writeln!(md, "- **Warning**: the previous run was on another GPU ({}).", p.device).unwrap();
        }
    }
    writeln!(
        md,
        "- Inputs: N(0, 1)-like f32 logits (and Zipf-like rows where named); draft logits 0.8·target + 0.6·noise \
         in bf16, drafts sampled from them; T = {} for every non-greedy case.",
        bench.temperature
    )
    .unwrap();
    writeln!(
        md,
        "- Made by: the `gpu` bench binary and `benches/torch_baseline.py`, as `cargo xtask bench-gpu --bundle DIR` \
         packs them (`bench.sh`), run on the GPU machine in one call, then `cargo xtask bench-report` on the fetched \
         directory here; the JSON files beside this one are that run's output.\n"
    )
    .unwrap();
    writeln!(md, "![achieved bandwidth against batch]({svg})\n").unwrap();

    let torch_us = |c: &Case| torch.and_then(|t| t.cases.get(&c.name));
    let table = |md: &mut String, cases: &[&Case]| {
        md.push_str("| case | specdec µs | % of copy | target µs | µs / target | met |");
        if previous.is_some() {
            md.push_str(" µs / previous |");
        }
        md.push_str(" torch µs | speed-up |\n| --- | ---: | ---: | ---: | ---: | :-: |");
        if previous.is_some() {
            md.push_str(" ---: |");
        }
        md.push_str(" ---: | ---: |\n");
        for c in cases {
            let (t, speedup) = match torch_us(c) {
                Some(t) => {
                    let how = if t.method == "graph" { String::new() } else { format!(" *{}*", t.method) };
                    (format!("{:.1}{how}", t.us), format!("{:.2}×", t.us / c.us))
                }
                None => ("–".to_string(), "–".to_string()),
            };
            let ratio = target_ratio(c, copy);
            write!(
                md,
                "| {} | {:.1} | {:.0} | {:.1} | {ratio:.2} | {} |",
                c.name,
                c.us,
                100.0 * c.gbs / copy,
                target_us(c.bytes, copy),
                mark(ratio)
            )
            .unwrap();
            if let Some(p) = previous {
                write!(md, " {} |", p.cell(c)).unwrap();
            }
            writeln!(md, " {t} | {speedup} |").unwrap();
        }
        md.push('\n');
    };
    let ops: BTreeSet<&str> = bench.cases.iter().map(|c| c.op.as_str()).collect();
    for op in &ops {
        writeln!(md, "## {op}\n").unwrap();
        let cases: Vec<&Case> = bench.cases.iter().filter(|c| c.op == *op).collect();
        table(&mut md, &cases);
    }
    let latency: Vec<&Case> = bench.cases.iter().filter(|c| c.latency).collect();
    if !latency.is_empty() {
        md.push_str("## Latency cases\n\n");
        table(&mut md, &latency);
    }
    let filtered: Vec<(&Case, f64)> = bench.cases.iter().filter_map(|c| Some((c, c.unfiltered_us?))).collect();
    if !filtered.is_empty() {
        md.push_str(
            "## Sampling filters\n\n\
             Each filtered case (the filter on every slot; name suffix `+…`) beside the same call without filters, \
             measured in the same run (the name less the suffix).\n\n\
             | case | specdec µs | unfiltered µs | filtered / unfiltered |\n| --- | ---: | ---: | ---: |\n",
        );
        for (c, u) in filtered {
            writeln!(md, "| {} | {:.1} | {u:.1} | {:.2} |", c.name, c.us, c.us / u).unwrap();
        }
        md.push('\n');
    }
    let with_outputs: Vec<(&Case, f64)> = bench.cases.iter().filter_map(|c| Some((c, c.plain_us?))).collect();
    if !with_outputs.is_empty() {
        md.push_str(
            "## Outputs beside the tokens\n\n\
             Each outputs case (REFERENCE §8; name suffix ` +logprobs`: each emitted token's processed \
             log-probability; ` +top20`: also the top 20 under the processed distribution and the emitted token's \
             rank; ` +block`: block verification, REFERENCE §4.11, the tokens alone) beside the same call without \
             them, measured in the same run (the name less the suffix).\n\n\
             | case | specdec µs | plain µs | with outputs / plain |\n| --- | ---: | ---: | ---: |\n",
        );
        for (c, u) in with_outputs {
            writeln!(md, "| {} | {:.1} | {u:.1} | {:.2} |", c.name, c.us, c.us / u).unwrap();
        }
        md.push('\n');
    }

    if !bench.host.is_empty() {
        md.push_str(&host_section(&bench.host));
    }

    if let Some(t) = torch {
        md.push_str("## Summary\n\nGeometric-mean speed-up over the cases both runs measured.\n\n");
        md.push_str("| operation | path | cases | speed-up (geomean) | min | max |\n");
        md.push_str("| --- | --- | ---: | ---: | ---: | ---: |\n");
        let mut groups: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
        for c in &bench.cases {
            if let Some(tc) = t.cases.get(&c.name) {
                groups.entry((c.op.as_str(), c.mode.as_str())).or_default().push(tc.us / c.us);
            }
        }
        for ((op, mode), s) in &groups {
            let geo = (s.iter().map(|x| x.ln()).sum::<f64>() / s.len() as f64).exp();
            let min = s.iter().copied().fold(f64::INFINITY, f64::min);
            let max = s.iter().copied().fold(0.0, f64::max);
            writeln!(md, "| {op} | {mode} | {} | {geo:.2}× | {min:.2}× | {max:.2}× |", s.len()).unwrap();
        }
        let missing: Vec<&str> =
            bench.cases.iter().filter(|c| !t.cases.contains_key(&c.name)).map(|c| c.name.as_str()).collect();
        if !missing.is_empty() {
            writeln!(md, "\n{} specdec cases have no PyTorch measurement.", missing.len()).unwrap();
        }
        let variants: BTreeSet<&str> = t.cases.values().map(|c| c.variant.as_str()).collect();
        writeln!(md, "\nPyTorch ways that won a case: {}.", variants.into_iter().collect::<Vec<_>>().join(", "))
            .unwrap();
    }
    let reps: BTreeSet<u64> = bench.cases.iter().map(|c| c.reps).collect();
    if reps.len() > 1 {
        let long: Vec<&str> = bench.cases.iter().filter(|c| c.reps != bench.reps).map(|c| c.name.as_str()).collect();
        writeln!(md, "\nspecdec cases timed with {} replays: {}.", bench.reps_long, long.join("; ")).unwrap();
    }
    md
}

/// The report's section on the host time of a call.
fn host_section(host: &BTreeMap<String, (Option<f64>, Option<f64>)>) -> String {
    let mut md = String::from(
        "## Host time per call\n\n\
         CPU time of one call on the CUDA backend (validation, stride bookkeeping and launches; no graph), \
         calls back to back between synchronisations, median over batches: on one stream without cudarc's \
         event tracking, and with it (cudarc's default once a context has a stream of its own, as \
         `Cuda::on_device` makes: each view a call takes waits for its last writer and records an event). \
         The driver's floor beside them: one launch of an empty kernel (a call of `rejection_sample` makes two \
         launches, one of `gumbel_sample` one).\n\n\
         | case | µs, no event tracking | µs, event tracking |\n| --- | ---: | ---: |\n",
    );
    let us = |t: Option<f64>| t.map_or("–".to_string(), |t| format!("{t:.1}"));
    for (name, (off, on)) in host {
        writeln!(md, "| {name} | {} | {} |", us(*off), us(*on)).unwrap();
    }
    md.push('\n');
    md
}

/// One panel of the plot: the cases of one operation at one vocabulary (and K).
struct Panel<'a> {
    title: String,
    x_desc: &'static str,
    cases: Vec<&'a Case>,
}

fn panels(bench: &Bench) -> Vec<Panel<'_>> {
    let mut groups: BTreeMap<(String, u64, u64), Vec<&Case>> = BTreeMap::new();
    for c in &bench.cases {
        if c.input != "normal"
            || c.filter_case
            || c.outputs_case
            || (c.op == "rejection_sample" && c.logits_dtype != "f32")
        {
            continue;
        }
        groups.entry((c.op.clone(), c.vocab, c.max_drafts.unwrap_or(0))).or_default().push(c);
    }
    groups
        .into_iter()
        .filter(|(_, cases)| cases.iter().map(|c| c.batch()).collect::<BTreeSet<_>>().len() >= 2)
        .map(|((op, vocab, k), cases)| {
            let (title, x_desc) = if op == "rejection_sample" {
                (format!("{op}, V = {vocab}, K = {k}"), "requests B")
            } else {
                (format!("{op}, V = {vocab}"), "rows")
            };
            Panel { title, x_desc, cases }
        })
        .collect()
}

const COLORS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(214, 39, 40)];

fn plot(bench: &Bench, torch: Option<&Torch>, path: &Path) -> Result<()> {
    let panels = panels(bench);
    if panels.is_empty() {
        return Err("no case series to plot (bench.json has no case grid)".into());
    }
    let columns = 2;
    let rows = panels.len().div_ceil(columns);
    let (w, h) = (620u32, 380u32);
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let root = SVGBackend::new(path, (w * columns as u32, 50 + h * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let title = format!(
        "Achieved bandwidth against batch: specdec (solid) and PyTorch (dashed), {}; copy ceiling {:.0} GB/s",
        bench.device, bench.copy_gbs
    );
    let title = if torch.is_some() { title } else { title.replace(" and PyTorch (dashed)", "") };
    let (top, body) = root.split_vertically(50);
    top.draw(&Text::new(title, (20, 15), ("sans-serif", 20).into_font())).map_err(|e| err(&e))?;
    let areas = body.split_evenly((rows, columns));
    for (area, panel) in areas.iter().zip(&panels) {
        let batches: BTreeSet<u64> = panel.cases.iter().map(|c| c.batch()).collect();
        let x_max = *batches.last().unwrap() as f64;
        let torch_gbs = |c: &Case| torch.and_then(|t| t.cases.get(&c.name)).map(|t| c.bytes / t.us / 1e3);
        let y_max =
            panel.cases.iter().flat_map(|c| [Some(c.gbs), torch_gbs(c)]).flatten().fold(bench.copy_gbs, f64::max)
                * 1.08;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(38)
            .y_label_area_size(58)
            .build_cartesian_2d(
                (0.7f64..x_max * 1.4).log_scale().with_key_points(batches.iter().map(|&b| b as f64).collect()),
                0f64..y_max,
            )
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(panel.x_desc)
            .y_desc("GB/s")
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|x| format!("{}", x.round()))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(|e| err(&e))?;
        let copy = bench.copy_gbs;
        chart
            .draw_series(LineSeries::new([(0.7, copy), (x_max * 1.4, copy)], BLACK.stroke_width(1)))
            .map_err(|e| err(&e))?
            .label(format!("copy {copy:.0} GB/s"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
        let modes: Vec<&str> = panel.cases.iter().fold(Vec::new(), |mut modes, c| {
            if !modes.contains(&c.mode.as_str()) {
                modes.push(c.mode.as_str());
            }
            modes
        });
        for (i, mode) in modes.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut cases: Vec<&Case> = panel.cases.iter().copied().filter(|c| c.mode == *mode).collect();
            cases.sort_by_key(|c| c.batch());
            let points: Vec<(f64, f64)> = cases.iter().map(|c| (c.batch() as f64, c.gbs)).collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(*mode)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(|e| err(&e))?;
            let torch_points: Vec<(f64, f64)> =
                cases.iter().filter_map(|c| torch_gbs(c).map(|g| (c.batch() as f64, g))).collect();
            if !torch_points.is_empty() {
                chart
                    .draw_series(DashedLineSeries::new(torch_points.clone(), 6, 4, color.stroke_width(1)))
                    .map_err(|e| err(&e))?;
                chart
                    .draw_series(torch_points.iter().map(|&p| Circle::new(p, 2, color.stroke_width(1))))
                    .map_err(|e| err(&e))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_780_000_000), "2026-05-28");
    }

    #[test]
    fn slugs() {
        assert_eq!(slug("NVIDIA H200 (sm_90)"), "nvidia-h200");
        assert_eq!(slug("NVIDIA GeForce RTX 4090"), "nvidia-geforce-rtx-4090");
        assert_eq!(slug("  "), "gpu");
    }

    /// The baseline's floor is read when present (older torch.json files have none).
    #[test]
    fn torch_floor() {
        let dir = std::env::temp_dir().join(format!("specdec-report-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("torch.json");
        let json = |floor: &str| {
            format!(r#"{{"device": "NVIDIA H200", "torch": "2.11", "cuda": "13.0", {floor} "cases": []}}"#)
        };
        std::fs::write(&path, json(r#""floor": {"one_kernel_us": 3.23, "two_kernels_us": 4.32},"#)).unwrap();
        assert_eq!(read_torch(&path).unwrap().floor, Some((3.23, 4.32)));
        assert!(
            floor_line(3.23, 4.32)
                .contains("one tiny kernel replays in 3.2 µs, of two dependent tiny kernels in 4.3 µs")
        );
        std::fs::write(&path, json("")).unwrap();
        assert_eq!(read_torch(&path).unwrap().floor, None);
        std::fs::write(&path, json(r#""floor": {"one_kernel_us": 3.23},"#)).unwrap();
        assert!(read_torch(&path).is_err(), "a floor without its second number is an error");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The report says how the run treated the L2: flushed, or left warm
    /// by `--warm` (whose small calls find their code and data there).
    #[test]
    fn the_report_says_how_the_run_treated_the_l2() {
        let dir = std::env::temp_dir().join(format!("specdec-report-l2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bench.json");
        for (flush, note) in
            [(536_870_912, "L2 flushed (512 MiB memset) before each replay"), (0, "L2 left warm between replays")]
        {
            let json = format!(
                r#"{{"device": "GPU X", "unix_time": 0, "wall_s": 1, "reps": 50, "reps_long": 20, "long_us": 5000,
                "flush_bytes": {flush}, "temperature": 0.8, "copy": {{"gbs": 4000}}, "cases": []}}"#
            );
            std::fs::write(&path, json).unwrap();
            let md = markdown(&read_bench(&path).unwrap(), None, None, "x.svg");
            assert!(md.contains(note), "no {note:?} in:\n{md}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Host times are read by case and tracking mode when present (older
    /// bench.json files have none) and tabulated side by side.
    #[test]
    fn host_times() {
        let dir = std::env::temp_dir().join(format!("specdec-report-host-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bench.json");
        let json = |host: &str| {
            format!(
                r#"{{"device": "GPU X", "unix_time": 0, "wall_s": 1, "reps": 50, "reps_long": 20, "long_us": 5000,
                "flush_bytes": 0, "temperature": 0.8, "copy": {{"gbs": 4000}}, "cases": [] {host}}}"#
            )
        };
        std::fs::write(&path, json("")).unwrap();
        assert!(read_bench(&path).unwrap().host.is_empty());
        let entries = r#", "host": [{"case": "a", "event_tracking": false, "us": 4.25},
            {"case": "a", "event_tracking": true, "us": 31.0}, {"case": "b", "event_tracking": true, "us": 9.0}]"#;
        std::fs::write(&path, json(entries)).unwrap();
        let host = read_bench(&path).unwrap().host;
        assert_eq!(host.get("a"), Some(&(Some(4.25), Some(31.0))));
        assert_eq!(host.get("b"), Some(&(None, Some(9.0))));
        let md = host_section(&host);
        assert!(md.contains("| a | 4.2 | 31.0 |") && md.contains("| b | – | 9.0 |"), "{md}");
        std::fs::write(&path, json(r#", "host": [{"case": "a", "event_tracking": 1, "us": 4.0}]"#)).unwrap();
        assert!(read_bench(&path).is_err(), "a tracking mode that is not a boolean is an error");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn options() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let options = |results: Option<&str>, previous: Option<&str>| Options {
            dir: PathBuf::from("out"),
            results: results.map(PathBuf::from),
            previous: previous.map(PathBuf::from),
        };
        assert_eq!(parse(&s(&["out"])).unwrap(), options(None, None));
        assert_eq!(parse(&s(&["--results", "/tmp/r", "out"])).unwrap(), options(Some("/tmp/r"), None));
        assert_eq!(parse(&s(&["out", "--previous", "p.json"])).unwrap(), options(None, Some("p.json")));
        assert_eq!(
            parse(&s(&["--previous=p.json", "--results=/tmp/r", "out"])).unwrap(),
            options(Some("/tmp/r"), Some("p.json"))
        );
        assert!(parse(&s(&[])).is_err());
        assert!(parse(&s(&["a", "b"])).is_err());
        assert!(parse(&s(&["--nope"])).is_err());
        assert!(parse(&s(&["out", "--previous"])).is_err());
    }

    /// A case of `bytes` timed at `us`, every other field made up.
    fn case(name: &str, us: f64, bytes: f64) -> Case {
        Case {
            name: name.to_string(),
            op: "rejection_sample".to_string(),
            mode: "greedy".to_string(),
            logits_dtype: "f32".to_string(),
            input: "normal".to_string(),
            vocab: 151_936,
            rows: 1,
            requests: Some(1),
            max_drafts: Some(1),
            latency: false,
            us,
            bytes,
            gbs: bytes / us / 1e3,
            reps: 50,
            filter_case: false,
            unfiltered_us: None,
            outputs_case: false,
            plain_us: None,
        }
    }

    /// A small call's target is its copy time + 10 µs, a large call's its
    /// time at 85 % of the copy bandwidth; the two meet where the copy time
    /// is 10 µs × 0.85 / 0.15.
    #[test]
    fn the_target_is_the_floor_plus_10_us_or_85_percent() {
        let copy = 4000.0; // GB/s: 4 MB take 1 µs
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.max(1.0);
        assert!(close(target_us(4e6, copy), 11.0), "a 1 µs copy: {}", target_us(4e6, copy));
        assert!(close(target_us(0.0, copy), 10.0));
        assert!(close(target_us(4e9, copy), 1000.0 / 0.85), "a 1000 µs copy: {}", target_us(4e9, copy));
        let knee = 4e6 * 10.0 * 0.85 / 0.15;
        assert!(close(target_us(knee, copy), 10.0 / 0.15));
        assert!(close(target_us(knee * 0.9, copy), knee * 0.9 / 4e6 + 10.0));
        assert!(close(target_us(knee * 1.1, copy), knee * 1.1 / 4e6 / 0.85));
        // Twice the bandwidth halves a large call's target; a small one keeps its 10 µs.
        assert!(close(target_us(4e9, 2.0 * copy), 500.0 / 0.85));
        assert!(close(target_us(4e6, 2.0 * copy), 10.5));
    }

    #[test]
    fn a_case_meets_the_target_at_a_ratio_of_at_most_1() {
        let copy = 4000.0;
        let at = |us: f64| target_ratio(&case("c", us, 4e6), copy);
        assert_eq!(at(11.0), 1.0);
        assert_eq!(mark(at(11.0)), "✓");
        assert_eq!(mark(at(5.5)), "✓");
        assert!((at(5.5) - 0.5).abs() < 1e-12);
        assert_eq!(mark(at(11.01)), "✗");
        assert_eq!(mark(target_ratio(&case("big", 1000.0 / 0.85, 4e9), copy)), "✓");
        assert_eq!(mark(target_ratio(&case("big", 1200.0, 4e9), copy)), "✗");
    }

    #[test]
    fn the_summary_counts_cases_names_the_worst_and_takes_the_median() {
        let copy = 4000.0;
        // Targets: 11 µs for 4 MB, 1000 / 0.85 µs for 4 GB.
        let cases = [
            case("a", 5.5, 4e6),
            case("b", 22.0, 4e6),
            case("c", 11.0, 4e6),
            case("d", 1000.0 / 0.85 * 1.5, 4e9),
            case("e", 1000.0, 4e9),
        ];
        let summary = target_summary(&cases, copy);
        assert_eq!((summary.met, summary.total), (3, 5));
        let (worst, ratio) = summary.worst.unwrap();
        assert_eq!(worst, "b");
        assert!((ratio - 2.0).abs() < 1e-12);
        assert!((summary.median.unwrap() - 1.0).abs() < 1e-12, "ratios 0.5, 2, 1, 1.5, 0.85");
        assert_eq!(
            summary.line(),
            "Memory-floor target: 3 / 5 cases meet it; worst time / target 2.00 (b); median 1.00."
        );
        // An even count: the mean of the middle two; equal worsts: the first.
        let summary = target_summary(&cases[..2], copy);
        assert!((summary.median.unwrap() - 1.25).abs() < 1e-12);
        let twice = [case("x", 22.0, 4e6), case("y", 22.0, 4e6)];
        assert_eq!(target_summary(&twice, copy).worst.map(|(name, _)| name), Some("x"));
        let none = target_summary(&[], copy);
        assert_eq!(none, TargetSummary { met: 0, total: 0, worst: None, median: None });
        assert_eq!(none.line(), "Memory-floor target: 0 / 0 cases meet it.");
    }

    /// The filtered cases and the unfiltered calls beside them are not counted against the target.
    #[test]
    fn the_summary_leaves_out_the_filter_cases() {
        let copy = 4000.0;
        let filtered = Case { filter_case: true, unfiltered_us: Some(11.0), ..case("a T=1 +k20", 44.0, 4e6) };
        let cases = [case("a", 11.0, 4e6), Case { filter_case: true, ..case("a T=1", 11.0, 4e6) }, filtered];
        let summary = target_summary(&cases, copy);
        assert_eq!((summary.met, summary.total, summary.worst.map(|(name, _)| name)), (1, 1, Some("a")));
    }

    /// An outputs case is not counted against the target (its plain call
    /// is) and is tabulated beside its plain call.
    #[test]
    fn the_summary_leaves_out_the_outputs_cases() {
        let copy = 4000.0;
        let top = Case { outputs_case: true, plain_us: Some(11.0), ..case("a +top20", 16.5, 4e6) };
        let cases = [case("a", 11.0, 4e6), top];
        let summary = target_summary(&cases, copy);
        assert_eq!((summary.met, summary.total, summary.worst.map(|(name, _)| name)), (1, 1, Some("a")));
        let bench = Bench {
            device: "GPU X".to_string(),
            unix_time: 0,
            wall_s: 1.0,
            reps: 50,
            reps_long: 20,
            long_us: 5000.0,
            flush_bytes: 0.0,
            temperature: 0.8,
            copy_gbs: copy,
            cases: cases.to_vec(),
            host: BTreeMap::new(),
        };
        let md = markdown(&bench, None, None, "x.svg");
        assert!(md.contains("## Outputs beside the tokens"), "{md}");
        assert!(md.contains("| a +top20 | 16.5 | 11.0 | 1.50 |"), "{md}");
        assert!(!md.contains("| a | 11.0 | 11.0 |"), "only the outputs case is in the table:\n{md}");
    }

    /// A bench.json of `cases` (name, µs, bytes) on `device` at copy 4000 GB/s.
    fn bench_json(device: &str, cases: &[(&str, f64, f64)]) -> String {
        let cases: Vec<String> = cases
            .iter()
            .map(|(name, us, bytes)| {
                format!(
                    r#"{{"case": "{name}", "op": "rejection_sample", "mode": "greedy", "logits_dtype": "f32",
                    "input": "normal", "vocab": 151936, "rows": 2, "requests": 1, "max_drafts": 1,
                    "us": {us}, "bytes": {bytes}, "gbs": {}, "reps": 50}}"#,
                    bytes / us / 1e3
                )
            })
            .collect();
        format!(
            r#"{{"device": "{device}", "unix_time": 1796180046, "wall_s": 1, "reps": 50, "reps_long": 20,
            "long_us": 5000, "flush_bytes": 0, "temperature": 0.8, "copy": {{"gbs": 4000}},
            "cases": [{}]}}"#,
            cases.join(", ")
        )
    }

    /// The previous run's times are matched by case name; a case it lacks
    /// shows "—", and the report has the column only when given one.
    #[test]
    fn the_previous_column_matches_cases_by_name() {
        let dir = std::env::temp_dir().join(format!("specdec-report-previous-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (now_path, before_path) = (dir.join("bench.json"), dir.join("before.bench.json"));
        let now = [("a", 5.5, 4e6), ("b", 22.0, 4e6), ("new", 11.0, 4e6)];
        std::fs::write(&now_path, bench_json("NVIDIA H200 (sm_90)", &now)).unwrap();
        let before = [("b", 44.0, 4e6), ("a", 11.0, 4e6), ("gone", 1.0, 4e6)];
        std::fs::write(&before_path, bench_json("NVIDIA H200 (sm_90)", &before)).unwrap();
        let bench = read_bench(&now_path).unwrap();
        let previous = read_previous(&before_path).unwrap();
        assert_eq!(previous.file, "before.bench.json");
        let by_name = |name: &str| bench.cases.iter().find(|c| c.name == name).unwrap();
        assert_eq!(previous.ratio(by_name("a")), Some(0.5));
        assert_eq!(previous.ratio(by_name("b")), Some(0.5));
        assert_eq!(previous.ratio(by_name("new")), None);
        assert_eq!(previous.cell(by_name("a")), "0.50");
        assert_eq!(previous.cell(by_name("new")), "—");

        let md = markdown(&bench, None, Some(&previous), "x.svg");
        let header =
            "| case | specdec µs | % of copy | target µs | µs / target | met | µs / previous | torch µs | speed-up |";
        assert!(md.contains(header), "{md}");
        assert!(md.contains("| a | 5.5 | 18 | 11.0 | 0.50 | ✓ | 0.50 | – | – |"), "{md}");
        assert!(md.contains("| b | 22.0 | 5 | 11.0 | 2.00 | ✗ | 0.50 | – | – |"), "{md}");
        assert!(md.contains("| new | 11.0 | 9 | 11.0 | 1.00 | ✓ | — | – | – |"), "{md}");
        assert!(md.contains("`before.bench.json` (NVIDIA H200 (sm_90), 2026-12-02)"), "{md}");
        assert!(md.contains("(2 of 3 cases matched, median 0.50)"), "{md}");
        assert!(!md.contains("**Warning**"), "{md}");
        let rule = "time ≤ max(bytes / (0.85 × copy bandwidth), bytes / copy bandwidth + 10 µs)";
        assert_eq!(target_rule(), rule);
        assert_eq!(md.matches(rule).count(), 1, "the rule is stated once:\n{md}");
        assert!(
            md.contains("**Memory-floor target: 2 / 3 cases meet it; worst time / target 2.00 (b); median 1.00.**")
        );

        let md = markdown(&bench, None, None, "x.svg");
        assert!(!md.contains("previous"), "no --previous, no column:\n{md}");
        assert!(md.contains("| a | 5.5 | 18 | 11.0 | 0.50 | ✓ | – | – |"), "{md}");

        std::fs::write(&before_path, bench_json("GPU Y", &before)).unwrap();
        let md = markdown(&bench, None, Some(&read_previous(&before_path).unwrap()), "x.svg");
        assert!(md.contains("**Warning**: the previous run was on another GPU (GPU Y)."), "{md}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
