//! The flags and settings of a sequential eval (`cowork eval --sequential`,
//! decisions.md#eval-sequential). The test itself is `eval::sequential`'s; these are what the
//! plan carries, so that admission can stop the batch at the deciding look.
//!
//! Pure: no IO, no clock, no environment.

use cowork_schema::batch::SequentialSpec;

use super::flags::{FlagError, js_number};

/// Looks when `--looks` is not given.
pub const DEFAULT_LOOKS: u32 = 5;
/// The most looks `--looks` takes (a look per pair is allowed below this; more looks cost no
/// validity, only report size).
pub const LOOKS_MAX: u32 = 1000;

/// The settings of a sequential eval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SequentialSettings {
    /// Planned looks (at least 1).
    pub looks: u32,
    /// Significance level, strictly between 0 and 1.
    pub alpha: f64,
    /// The smallest difference worth detecting, as a fraction in (0, 1].
    pub mde: Option<f64>,
}

impl SequentialSettings {
    /// The settings of a spec's sequential design at the eval's `alpha`.
    pub fn of(spec: &SequentialSpec, alpha: f64) -> SequentialSettings {
        SequentialSettings {
            looks: spec.looks,
            alpha,
            mde: spec.mde,
        }
    }
}

/// Validates `--sequential` and `--looks K` (an integer from 1 to [`LOOKS_MAX`], only with
/// `--sequential`); `mde` is `--mde` as the eval's flags already checked it (a fraction), which
/// the futility stop uses. Returns the design, `None` without `--sequential`, or every problem
/// found.
pub fn validate_sequential_flags(
    sequential: bool,
    looks: Option<&str>,
    mde: Option<f64>,
) -> Result<Option<SequentialSpec>, Vec<FlagError>> {
    let mut errors = Vec::new();
    let looks = match looks {
        None => DEFAULT_LOOKS,
        Some(_) if !sequential => {
            errors.push(FlagError {
                flag: "--looks",
                message: "only applies with --sequential; add --sequential or drop --looks"
                    .to_owned(),
            });
            DEFAULT_LOOKS
        }
        Some(text) => {
            let looks = js_number(text);
            if looks.is_finite()
                && looks.fract() == 0.0
                && (1.0..=f64::from(LOOKS_MAX)).contains(&looks)
            {
                looks as u32
            } else {
                errors.push(FlagError {
                    flag: "--looks",
                    message: format!("must be an integer from 1 to {LOOKS_MAX}, got {text:?}"),
                });
                DEFAULT_LOOKS
            }
        }
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(sequential.then_some(SequentialSpec { looks, mde }))
}
