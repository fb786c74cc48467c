//! The harness process settings every command that runs jobs shares (`--harness-grace`,
//! `--harness-env`): checked once, then applied to the harness executor's config.

use std::time::Duration;

use cowork_worker::executor::harness::{DEFAULT_STOP_GRACE, HarnessConfig};

use crate::args::HarnessProcessArgs;
use crate::exit::CliError;

/// `--harness-grace` and `--harness-env`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HarnessProcess {
    /// SIGTERM-to-SIGKILL grace of a stopped harness.
    pub stop_grace: Duration,
    /// Names passed through beside the default allow-list.
    pub extra_env: Vec<String>,
}

impl Default for HarnessProcess {
    /// The defaults of the flags: safe to run with.
    fn default() -> Self {
        HarnessProcess {
            stop_grace: DEFAULT_STOP_GRACE,
            extra_env: Vec::new(),
        }
    }
}

impl HarnessProcess {
    /// Checks the flags: a duration, and names a shell could export. Every bad name is
    /// reported at once; nothing has run yet.
    pub fn from_args(args: &HarnessProcessArgs) -> Result<HarnessProcess, CliError> {
        let stop_grace = crate::connect::duration_arg("--harness-grace", &args.harness_grace)?;
        let bad: Vec<&str> = args
            .harness_env
            .iter()
            .map(String::as_str)
            .filter(|name| !is_env_name(name))
            .collect();
        if !bad.is_empty() {
            return Err(CliError::usage(format!(
                "--harness-env (or COWORK_HARNESS_ENV): {} {} (letters, digits and _, not \
                 starting with a digit); pass one name per flag, without a value: the harness \
                 gets the worker's own value",
                bad.iter()
                    .map(|name| format!("{name:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if bad.len() == 1 {
                    "is not an environment variable name"
                } else {
                    "are not environment variable names"
                }
            )));
        }
        Ok(HarnessProcess {
            stop_grace,
            extra_env: args.harness_env.clone(),
        })
    }

    /// `config` with this grace and the extra names added to its allow-list.
    pub fn apply(&self, config: HarnessConfig) -> HarnessConfig {
        let mut passthrough_env = config.passthrough_env;
        for name in &self.extra_env {
            if !passthrough_env.contains(name) {
                passthrough_env.push(name.clone());
            }
        }
        HarnessConfig {
            stop_grace: self.stop_grace,
            passthrough_env,
            ..config
        }
    }
}

/// Whether `name` is a portable environment variable name.
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_ascii_alphabetic())
        && chars.all(|rest| rest == '_' || rest.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_worker::executor::harness::DEFAULT_PASSTHROUGH_ENV;

    #[test]
    fn names_a_shell_can_export_pass_and_others_do_not() {
        for good in ["FOO", "_X", "COWORK_LIMACTL", "a1"] {
            assert!(is_env_name(good), "{good}");
        }
        for bad in ["", "1X", "FOO=bar", "A-B", "A B"] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }

    #[test]
    fn extra_names_join_the_allow_list_once() {
        let process = HarnessProcess {
            stop_grace: Duration::from_secs(5),
            extra_env: vec!["MY_VAR".to_owned(), "PATH".to_owned()],
        };
        let config = process.apply(HarnessConfig::default());
        assert_eq!(config.stop_grace, Duration::from_secs(5));
        assert_eq!(
            config.passthrough_env.len(),
            DEFAULT_PASSTHROUGH_ENV.len() + 1,
            "{:?}",
            config.passthrough_env
        );
        assert!(config.passthrough_env.iter().any(|name| name == "MY_VAR"));
    }
}
