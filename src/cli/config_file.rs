//! `--config FILE` (`UNREAD_CONFIG`): settings from a TOML file, under the flags and `UNREAD_*` variables.
//!
//! The file is flat: each key is a flag's long name (`brokers`, `flush-interval`, `auth-hs256-secret`, …), each
//! value a string, a number, a boolean or an array of strings (joined with commas: `roles = ["fanout", "fold"]`).
//! Every key is the flag of an `UNREAD_*` variable, and the file is applied by setting the variables that are not
//! set already, before the command line is parsed: a flag wins over a variable, a variable over the file, the file
//! over the default. A key that names no such flag is refused, so a typo is not silently ignored.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The `UNREAD_*` variable of each flag that has one, by the flag's long name, over every subcommand.
fn variables(command: &clap::Command) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut walk = vec![command];
    while let Some(c) = walk.pop() {
        for arg in c.get_arguments() {
            if let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) {
                out.insert(long.to_owned(), env.to_string_lossy().into_owned());
            }
        }
        walk.extend(c.get_subcommands());
    }
    out
}

/// The config file named by `--config FILE`, `--config=FILE` or `UNREAD_CONFIG`, if any.
fn named(args: &[OsString]) -> Option<PathBuf> {
    let mut args = args.iter().map(|a| a.to_string_lossy());
    while let Some(a) = args.next() {
        if a == "--config" {
            return args.next().map(|p| PathBuf::from(p.as_ref()));
        }
        if let Some(path) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("UNREAD_CONFIG").map(PathBuf::from)
}

/// A TOML value as a flag's text.
///
/// Errors: a table, a date, or an array of something else than strings.
fn text(key: &str, value: &toml::Value) -> anyhow::Result<String> {
    Ok(match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => {
            let strings: Option<Vec<&str>> = items.iter().map(toml::Value::as_str).collect();
            strings.with_context(|| format!("{key}: an array of strings is expected"))?.join(",")
        }
        _ => bail!("{key}: a string, a number, a boolean or an array of strings is expected"),
    })
}

/// The variables `path` sets: (variable, value) for each key, in the file's order of keys.
///
/// Errors: the file unreadable or not TOML; a key that is no flag with an `UNREAD_*` variable; a value of another
/// shape.
pub fn read(path: &Path, command: &clap::Command) -> anyhow::Result<Vec<(String, String)>> {
    let source = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let table: toml::Table = toml::from_str(&source).with_context(|| format!("{} is not TOML", path.display()))?;
    let known = variables(command);
    let mut out = Vec::new();
    for (key, value) in &table {
        let Some(variable) = known.get(key.as_str()) else {
            bail!(
                "{}: {key:?} is no setting (keys are flags' long names, e.g. brokers, flush-interval)",
                path.display()
            )
        };
        out.push((variable.clone(), text(key, value)?));
    }
    Ok(out)
}

/// Applies the config file named on the command line or by `UNREAD_CONFIG`, if any: sets each of its variables that
/// the environment does not set. Call it first in `main`, before any thread starts.
///
/// Errors: as [`read`], naming the file.
pub fn apply(args: &[OsString], command: &clap::Command) -> anyhow::Result<()> {
    let Some(path) = named(args) else { return Ok(()) };
    for (variable, value) in read(&path, command)? {
        if std::env::var_os(&variable).is_none() {
            std::env::set_var(variable, value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_maps_flags_to_their_variables_and_refuses_what_is_no_setting() {
        use clap::CommandFactory;
        let command = crate::cli::Cli::command();
        let dir = std::env::temp_dir().join(format!("unread-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("unread.toml");
        let body = "brokers = \"k:9092\"\nflush-interval = \"1s\"\nroles = [\"fanout\", \"fold\"]\nflush-events = 5\n";
        std::fs::write(&file, body).unwrap();
        let got = read(&file, &command).unwrap();
        let want = [
            ("UNREAD_BROKERS", "k:9092"),
            ("UNREAD_FLUSH_INTERVAL", "1s"),
            ("UNREAD_ROLES", "fanout,fold"),
            ("UNREAD_FLUSH_EVENTS", "5"),
        ];
        let got: Vec<(&str, &str)> = got.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got.len(), 4);
        assert!(want.iter().all(|w| got.contains(w)), "{got:?}");
        std::fs::write(&file, "brokerz = \"k:9092\"\n").unwrap();
        let err = read(&file, &command).unwrap_err().to_string();
        assert!(err.contains("\"brokerz\" is no setting"), "{err}");
        std::fs::write(&file, "roles = [1, 2]\n").unwrap();
        assert!(read(&file, &command).unwrap_err().to_string().contains("an array of strings"));
        let args: Vec<OsString> = ["unread", "lag", "--config", "x.toml"].iter().map(OsString::from).collect();
        assert_eq!(named(&args), Some(PathBuf::from("x.toml")));
        std::fs::remove_dir_all(dir).ok();
    }
}
