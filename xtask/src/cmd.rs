//! Running external commands. Each one is printed (`$ ENV=v program args`) before it runs.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, ExitStatus, Output};

use crate::Result;

/// The cargo that runs xtask (`$CARGO`), else `cargo` from `PATH`.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Prints the command, then runs it with the terminal's stdin/stdout/stderr.
/// A non-zero exit is not an error here; see [`run_ok`].
pub fn run(cmd: &mut Command) -> Result<ExitStatus> {
    print(cmd);
    cmd.status().map_err(|e| format!("could not start `{}`: {e}", program(cmd)))
}

/// Like [`run`], but a non-zero exit is an error.
pub fn run_ok(cmd: &mut Command) -> Result<()> {
    let status = run(cmd)?;
    if status.success() { Ok(()) } else { Err(format!("`{}` failed ({status})", display(cmd))) }
}

/// Prints the command, then runs it capturing stdout and stderr.
pub fn output(cmd: &mut Command) -> Result<Output> {
    print(cmd);
    cmd.output().map_err(|e| format!("could not start `{}`: {e}", program(cmd)))
}

pub fn print(cmd: &Command) {
    println!("$ {}", display(cmd));
}

/// `ENV=value program arg...`, each word shell-quoted when it needs it.
/// The cargo binary is shown as `cargo`.
pub fn display(cmd: &Command) -> String {
    let mut words = Vec::new();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            words.push(format!("{}={}", key.to_string_lossy(), quote(value)));
        }
    }
    words.push(program(cmd));
    words.extend(cmd.get_args().map(quote));
    words.join(" ")
}

fn program(cmd: &Command) -> String {
    let program = cmd.get_program();
    if Some(program) == std::env::var_os("CARGO").as_deref() {
        return "cargo".to_string();
    }
    quote(program)
}

fn quote(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.into_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Makes a file executable (`chmod +x`).
pub fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let err = |e| format!("chmod +x {}: {e}", path.display());
    let mut permissions = std::fs::metadata(path).map_err(err)?.permissions();
    permissions.set_mode(permissions.mode() | 0o111);
    std::fs::set_permissions(path, permissions).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_what_needs_it() {
        let mut cmd = Command::new("ptxas");
        cmd.env("A", "x y").args(["-arch=sm_90", "it's", "/a/b.ptx"]);
        assert_eq!(display(&cmd), r"A='x y' ptxas -arch=sm_90 'it'\''s' /a/b.ptx");
    }
}
