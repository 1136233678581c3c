//! Reading `ptxas -v` output: registers, spills, stack and shared memory per function.
//!
//! ptxas prints, per kernel (an "entry function"):
//!
//! ```text
//! ptxas info    : Compiling entry function 'gumbel_argmax' for 'sm_90'
//! ptxas info    : Function properties for gumbel_argmax
//!     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//! ptxas info    : Used 32 registers, used 1 barriers, 256 bytes smem, 400 bytes cmem[0]
//! ```
//!
//! and only the "Function properties" block for a device function that was not inlined.

/// One function's resources, as ptxas reports them. Sizes are in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub name: String,
    /// A kernel (`Compiling entry function`), as opposed to a device function.
    pub kernel: bool,
    /// Only reported for kernels.
    pub registers: Option<u32>,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub stack_frame: u32,
    /// Static shared memory (dynamic shared memory is sized at launch and not counted).
    pub shared: u32,
}

impl Usage {
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// Every function ptxas reported, in the order it first named them.
pub fn parse(text: &str) -> Vec<Usage> {
    let mut functions: Vec<Usage> = Vec::new();
    // "Used ..." belongs to the last entry function; "N bytes stack frame" to the last "Function properties".
    let mut entry: Option<usize> = None;
    let mut properties: Option<usize> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(info) = info_message(line) {
            if let Some(rest) = info.strip_prefix("Compiling entry function '") {
                let name = rest.split('\'').next().unwrap_or(rest);
                let i = index_of(&mut functions, name);
                functions[i].kernel = true;
                entry = Some(i);
            } else if let Some(name) = info.strip_prefix("Function properties for ") {
                properties = Some(index_of(&mut functions, name.trim()));
            } else if info.starts_with("Used ")
                && let Some(i) = entry
            {
                read_counts(info, &mut functions[i]);
            }
        } else if line.contains("bytes stack frame")
            && let Some(i) = properties
        {
            read_counts(line, &mut functions[i]);
        }
    }
    functions
}

/// `ptxas info    : MESSAGE` → `MESSAGE`.
fn info_message(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("ptxas info")?;
    Some(rest.trim_start().strip_prefix(':')?.trim())
}

fn index_of(functions: &mut Vec<Usage>, name: &str) -> usize {
    if let Some(i) = functions.iter().position(|f| f.name == name) {
        return i;
    }
    functions.push(Usage { name: name.to_string(), ..Usage::default() });
    functions.len() - 1
}

/// Reads comma-separated counts: `Used 32 registers`, `used 1 barriers`,
/// `256 bytes smem`, `0 bytes stack frame`, `8 bytes spill stores`, ...
fn read_counts(text: &str, usage: &mut Usage) {
    for part in text.split(',') {
        let words: Vec<&str> = part.split_whitespace().collect();
        let words = match words.first() {
            Some(w) if w.eq_ignore_ascii_case("used") => &words[1..],
            _ => &words[..],
        };
        let Some(Ok(n)) = words.first().map(|w| w.parse::<u32>()) else { continue };
        let label = words[1..].iter().filter(|w| **w != "bytes").copied().collect::<Vec<_>>().join(" ");
        match label.as_str() {
            "registers" => usage.registers = Some(n),
            "smem" => usage.shared = n,
            "stack frame" => usage.stack_frame = n,
            "spill stores" => usage.spill_stores = n,
            "spill loads" => usage.spill_loads = n,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Compiling entry function 'gumbel_argmax' for 'sm_90'
ptxas info    : Function properties for gumbel_argmax
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 256 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'verify' for 'sm_90'
ptxas info    : Function properties for verify
    16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, 380 bytes cmem[0]
";

    #[test]
    fn parses_kernels_and_device_functions() {
        let usage = parse(SAMPLE);
        assert_eq!(
            usage,
            vec![
                Usage {
                    name: "helper".into(),
                    kernel: false,
                    registers: None,
                    spill_stores: 8,
                    spill_loads: 12,
                    stack_frame: 24,
                    shared: 0
                },
                Usage {
                    name: "gumbel_argmax".into(),
                    kernel: true,
                    registers: Some(32),
                    spill_stores: 0,
                    spill_loads: 0,
                    stack_frame: 0,
                    shared: 256
                },
                Usage {
                    name: "verify".into(),
                    kernel: true,
                    registers: Some(255),
                    spill_stores: 4,
                    spill_loads: 4,
                    stack_frame: 16,
                    shared: 0
                },
            ]
        );
        assert!(usage[0].spills() && !usage[1].spills() && usage[2].spills());
    }

    #[test]
    fn ignores_other_lines() {
        assert!(parse("ptxas warning : something\nptxas info    : 0 bytes gmem\n").is_empty());
    }
}
