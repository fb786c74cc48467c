//! The one set of batch flag rules (harness-behaviour.md#repeat-flags,
//! harness-behaviour.md#matrix-flags): [`validate_flags`] turns what the user typed into
//! [`BatchFlags`], and [`check_spec_flags`] holds a submitted spec's flags to the same rules.
//!
//! Numbers are read with JavaScript `Number()` semantics like the CLI
//! (harness-behaviour.md#js-number-flags): surrounding whitespace is ignored, `0x`/`0o`/`0b`
//! prefixes and exponents are accepted, the empty string reads as 0 and anything else that is not a
//! number is NaN. "Needs --repeat" and "needs --matrix" compare a flag with its default value, so
//! an explicit default passes (harness-behaviour.md#default-compare).
//!
//! Fleet deviations from the CLI:
//! - `--repeat` accepts 2..=[`REPEAT_MAX`] (the CLI: 2..=100); a fleet is for wide sweeps.
//! - `--max-cells` accepts 1..=[`MAX_CELLS_MAX`] (the CLI has no upper bound), so that a typo
//!   cannot plan billions of jobs.
//! - `--decider-dir` and `--decider-cmd` are always refused (harness-behaviour.md#choice-c11): an
//!   external decider is one interactive, strictly serial channel that distributed jobs cannot
//!   share.
//! - `--concurrency` is validated like the CLI (1..=8, needs `--matrix`) but has no effect: fleet
//!   parallelism comes from worker slots and tier caps.
//! - `--job-timeout` is the fleet's own flag (harness-behaviour.md#choice-c13): a duration with a
//!   unit, such as `90s`, `30m` or `2h` (a bare number is refused: it was read as milliseconds,
//!   which nobody meant).

use cowork_schema::batch::{
    BatchFlags, MAX_CELLS_DEFAULT, MAX_CELLS_MAX, OnStall, OnUnanswered, REPEAT_MAX, REPEAT_MIN,
};
use cowork_schema::pricing::Pricing;
use cowork_schema::share::Priority;
use cowork_schema::unit::Tier;

/// The batch flags as typed: strings for values, booleans for switches. `None` means the flag
/// was not given; `Some("")` is a flag given with an empty value (`--repeat=`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawFlags {
    pub repeat: Option<String>,
    pub min_pass_rate: Option<String>,
    pub stop_on_diverge: bool,
    pub max_budget_usd: Option<String>,
    pub batch_budget_usd: Option<String>,
    pub allow_budget_stop: bool,
    pub matrix: Option<String>,
    pub max_cells: Option<String>,
    pub allow_truncated_matrix: bool,
    pub concurrency: Option<String>,
    pub decider_dir: Option<String>,
    pub decider_cmd: Option<String>,
    pub ablate_skill: bool,
    pub on_unanswered: Option<String>,
    pub decider_model: Option<String>,
    pub label: Option<String>,
    pub job_timeout: Option<String>,
    /// `--stall-after DURATION`.
    pub stall_after: Option<String>,
    /// `--on-stall cancel|none`.
    pub on_stall: Option<String>,
    /// `--sandbox-price TIER=USD_PER_MIN` entries (decisions.md#whole-cost).
    pub sandbox_price: Vec<String>,
    /// `--model-price MODEL=USD_PER_RUN` entries.
    pub model_price: Vec<String>,
    /// `--allow-unpriced`.
    pub allow_unpriced: bool,
    /// `--priority urgent|normal|batch` (decisions.md#fair-share).
    pub priority: Option<String>,
}

/// A refused flag. Displays as `--flag: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct FlagError {
    /// The flag as typed on the command line, e.g. `--repeat`.
    pub flag: &'static str,
    pub message: String,
}

/// Longest `--label`, in UTF-16 code units like JavaScript's `length`
/// (harness-behaviour.md#job-invocation).
const MAX_LABEL_LEN: usize = 200;
/// Most cells the CLI runs at once; `--concurrency` is validated against it
/// (harness-behaviour.md#matrix-flags).
const MAX_CONCURRENCY: f64 = 8.0;

/// Validates the batch flags, reporting every problem.
pub fn validate_flags(raw: &RawFlags) -> Result<BatchFlags, Vec<FlagError>> {
    let mut checked = Checked::default();
    check_repeat_flags(raw, &mut checked);
    check_matrix_flags(raw, &mut checked);
    check_run_flags(raw, &mut checked);
    check_pricing_flags(
        &raw.sandbox_price,
        &raw.model_price,
        raw.allow_unpriced,
        &mut checked.flags.pricing,
        &mut checked.errors,
    );
    if checked.errors.is_empty() {
        Ok(checked.flags)
    } else {
        Err(checked.errors)
    }
}

/// The flags validated so far and every problem found.
#[derive(Default)]
struct Checked {
    flags: BatchFlags,
    errors: Vec<FlagError>,
}

impl Checked {
    fn error(&mut self, flag: &'static str, message: String) {
        self.errors.push(FlagError { flag, message });
    }
}

/// `--repeat` and the flags that only mean something with it: the pass-rate bar, the early
/// stops and the budgets.
fn check_repeat_flags(raw: &RawFlags, checked: &mut Checked) {
    let has_repeat = raw.repeat.is_some();
    if let Some(text) = &raw.repeat {
        match integer_in(text, f64::from(REPEAT_MIN), f64::from(REPEAT_MAX)) {
            Some(n) => checked.flags.repeat = Some(n as u32),
            // One run is what a batch without --repeat does; say so rather than only refuse.
            None if js_number(text) == 1.0 => checked.error(
                "--repeat",
                format!(
                    "must be an integer from {REPEAT_MIN} to {REPEAT_MAX}, got {text:?}; for a single run leave --repeat out"
                ),
            ),
            None => checked.error(
                "--repeat",
                format!("must be an integer from {REPEAT_MIN} to {REPEAT_MAX}, got {text:?}"),
            ),
        }
    }
    if let Some(text) = &raw.min_pass_rate {
        let rate = js_number(text);
        if valid_rate(rate) {
            checked.flags.min_pass_rate = rate;
            if rate != 1.0 && !has_repeat {
                checked.error("--min-pass-rate", "needs --repeat".to_owned());
            }
        } else {
            checked.error(
                "--min-pass-rate",
                format!("must be a number from 0 to 1, got {text:?}"),
            );
        }
    }
    if raw.stop_on_diverge {
        checked.flags.stop_on_diverge = true;
        if !has_repeat {
            checked.error("--stop-on-diverge", "needs --repeat".to_owned());
        }
    }
    if let Some(text) = &raw.max_budget_usd {
        let budget = js_number(text);
        if valid_budget(budget) {
            // Allowed without --repeat: then it is a single-run pre-flight
            // (harness-behaviour.md#budget-preflight).
            checked.flags.max_budget_usd = Some(budget);
        } else {
            checked.error(
                "--max-budget-usd",
                format!("must be a number greater than 0, got {text:?}"),
            );
        }
    }
    if let Some(text) = &raw.batch_budget_usd {
        let budget = js_number(text);
        if !valid_budget(budget) {
            checked.error(
                "--batch-budget-usd",
                format!("must be a number greater than 0, got {text:?}"),
            );
        } else if !has_repeat {
            checked.error("--batch-budget-usd", "needs --repeat".to_owned());
        } else {
            checked.flags.batch_budget_usd = Some(budget);
        }
    }
    if raw.allow_budget_stop {
        checked.flags.allow_budget_stop = true;
        if !has_repeat {
            checked.error("--allow-budget-stop", "needs --repeat".to_owned());
        }
    }
}

/// `--matrix` and the flags that only mean something with it.
fn check_matrix_flags(raw: &RawFlags, checked: &mut Checked) {
    let has_matrix = raw.matrix.is_some();
    if let Some(path) = &raw.matrix
        && (path.is_empty() || path.starts_with('-'))
    {
        checked.error(
            "--matrix",
            format!("needs a matrix file path, got {path:?}"),
        );
    }
    if let Some(text) = &raw.max_cells {
        match integer_in(text, 1.0, f64::from(MAX_CELLS_MAX)) {
            Some(n) => {
                checked.flags.max_cells = n as u32;
                if checked.flags.max_cells != MAX_CELLS_DEFAULT && !has_matrix {
                    checked.error("--max-cells", "needs --matrix".to_owned());
                }
            }
            None => checked.error(
                "--max-cells",
                format!("must be an integer from 1 to {MAX_CELLS_MAX}, got {text:?}"),
            ),
        }
    }
    if raw.allow_truncated_matrix {
        checked.flags.allow_truncated_matrix = true;
        if !has_matrix {
            checked.error("--allow-truncated-matrix", "needs --matrix".to_owned());
        }
    }
    if let Some(text) = &raw.concurrency {
        match integer_in(text, 1.0, MAX_CONCURRENCY) {
            // Validated for parity only: the fleet's parallelism is set by slots and tier caps.
            Some(n) if n != 1.0 && !has_matrix => {
                checked.error("--concurrency", "needs --matrix".to_owned())
            }
            Some(_) => {}
            None => checked.error(
                "--concurrency",
                format!("must be an integer from 1 to 8, got {text:?}"),
            ),
        }
    }
}

/// The flags every run takes: deciders (refused), ablation, the unanswered policy, the decider
/// model, the label and the job timeout.
fn check_run_flags(raw: &RawFlags, checked: &mut Checked) {
    // Choice C11 (harness-behaviour.md#choice-c11): external deciders are refused outright in fleet
    // batches.
    for (flag, value) in [
        ("--decider-dir", &raw.decider_dir),
        ("--decider-cmd", &raw.decider_cmd),
    ] {
        if value.is_some() {
            checked.error(
                flag,
                "external deciders answer interactively, one run at a time, so fleet batches refuse them".to_owned(),
            );
        }
    }
    checked.flags.ablate_skill = raw.ablate_skill;
    if let Some(text) = &raw.on_unanswered {
        match text.as_str() {
            "fail" => checked.flags.on_unanswered = Some(OnUnanswered::Fail),
            "first" => checked.flags.on_unanswered = Some(OnUnanswered::First),
            "prompt" => checked.error(
                "--on-unanswered",
                "`prompt` is interactive and is refused by run".to_owned(),
            ),
            other => checked.error(
                "--on-unanswered",
                format!("must be fail or first, got {other:?}"),
            ),
        }
    }
    if let Some(model) = &raw.decider_model {
        if model.trim().is_empty() {
            checked.error("--decider-model", MUST_NOT_BE_EMPTY.to_owned());
        } else {
            checked.flags.decider_model = Some(model.clone());
        }
    }
    if let Some(label) = &raw.label {
        match label_problem(label) {
            Some(problem) => checked.error("--label", problem),
            None => checked.flags.label = Some(label.clone()),
        }
    }
    if let Some(text) = &raw.job_timeout {
        match cowork_schema::duration::parse_duration(text) {
            Ok(timeout) if !timeout.is_zero() => {
                checked.flags.job_timeout_ms = Some(timeout.as_millis() as u64);
            }
            Ok(_) => checked.error("--job-timeout", format!("must be above 0, got {text:?}")),
            Err(problem) => checked.error("--job-timeout", problem.to_string()),
        }
    }
    check_stall_flags(raw, checked);
    if let Some(text) = &raw.priority {
        match parse_priority(text) {
            Ok(priority) => checked.flags.priority = priority,
            Err(message) => checked.error("--priority", message),
        }
    }
}

/// A priority class by its name; the refusal names every class.
pub fn parse_priority(text: &str) -> Result<Priority, String> {
    Priority::parse(text.trim()).ok_or_else(|| {
        let [first @ .., last] = Priority::ALL.map(Priority::as_str);
        format!("must be {} or {last}, got {text:?}", first.join(", "))
    })
}

/// `--stall-after` (a duration above 0) and `--on-stall` (`cancel` or `none`).
fn check_stall_flags(raw: &RawFlags, checked: &mut Checked) {
    if let Some(text) = &raw.stall_after {
        match cowork_schema::duration::parse_duration(text) {
            Ok(after) if !after.is_zero() => {
                checked.flags.stall_after_ms =
                    Some(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
            }
            Ok(_) => checked.error("--stall-after", format!("must be above 0, got {text:?}")),
            Err(problem) => checked.error("--stall-after", problem.to_string()),
        }
    }
    match raw.on_stall.as_deref() {
        None => {}
        Some("cancel") => checked.flags.on_stall = Some(OnStall::Cancel),
        Some("none") => checked.flags.on_stall = Some(OnStall::None),
        Some(other) => checked.error(
            "--on-stall",
            format!("must be cancel or none, got {other:?}"),
        ),
    }
}

/// Checks the flags of a submitted spec: the same rules as [`validate_flags`] applied to the
/// values a client sent (a server trusts nothing it receives), each problem naming its field
/// (`spec.flags.repeat: …`). `has_matrix` says whether the spec names a matrix file.
pub fn check_spec_flags(flags: &BatchFlags, has_matrix: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let has_repeat = flags.repeat.is_some();
    if let Some(repeat) = flags.repeat
        && !(REPEAT_MIN..=REPEAT_MAX).contains(&repeat)
    {
        problems.push(format!(
            "spec.flags.repeat: must be an integer from {REPEAT_MIN} to {REPEAT_MAX}, got {repeat}"
        ));
    }
    let rate = flags.min_pass_rate;
    if !valid_rate(rate) {
        problems.push(format!(
            "spec.flags.minPassRate: must be a number from 0 to 1, got {rate}"
        ));
    } else if rate != 1.0 && !has_repeat {
        problems.push("spec.flags.minPassRate: needs repeat".to_owned());
    }
    if let Some(budget) = flags.max_budget_usd
        && !valid_budget(budget)
    {
        problems.push(format!(
            "spec.flags.maxBudgetUsd: must be a number greater than 0, got {budget}"
        ));
    }
    if let Some(budget) = flags.batch_budget_usd {
        if !valid_budget(budget) {
            problems.push(format!(
                "spec.flags.batchBudgetUsd: must be a number greater than 0, got {budget}"
            ));
        } else if !has_repeat {
            problems.push("spec.flags.batchBudgetUsd: needs repeat".to_owned());
        }
    }
    problems.extend(check_spec_pricing(&flags.pricing));
    if flags.stop_on_diverge && !has_repeat {
        problems.push("spec.flags.stopOnDiverge: needs repeat".to_owned());
    }
    if flags.allow_budget_stop && !has_repeat {
        problems.push("spec.flags.allowBudgetStop: needs repeat".to_owned());
    }
    if !(1..=MAX_CELLS_MAX).contains(&flags.max_cells) {
        problems.push(format!(
            "spec.flags.maxCells: must be an integer from 1 to {MAX_CELLS_MAX}, got {}",
            flags.max_cells
        ));
    } else if flags.max_cells != MAX_CELLS_DEFAULT && !has_matrix {
        problems.push("spec.flags.maxCells: needs a matrix file".to_owned());
    }
    if flags.allow_truncated_matrix && !has_matrix {
        problems.push("spec.flags.allowTruncatedMatrix: needs a matrix file".to_owned());
    }
    if let Some(model) = &flags.decider_model
        && model.trim().is_empty()
    {
        problems.push(format!("spec.flags.deciderModel: {MUST_NOT_BE_EMPTY}"));
    }
    if let Some(problem) = flags.label.as_deref().and_then(label_problem) {
        problems.push(format!("spec.flags.label: {problem}"));
    }
    if flags.job_timeout_ms == Some(0) {
        problems.push("spec.flags.jobTimeoutMs: must be greater than 0".to_owned());
    }
    if flags.stall_after_ms == Some(0) {
        problems.push("spec.flags.stallAfterMs: must be greater than 0".to_owned());
    }
    problems
}

/// A pass-rate bar is a number from 0 to 1.
fn valid_rate(rate: f64) -> bool {
    rate.is_finite() && (0.0..=1.0).contains(&rate)
}

/// A budget is a finite number of dollars above 0.
fn valid_budget(usd: f64) -> bool {
    usd.is_finite() && usd > 0.0
}

/// What a blank decider model is told.
const MUST_NOT_BE_EMPTY: &str = "must not be empty";

/// What is wrong with a label, if anything: it is one line of at most [`MAX_LABEL_LEN`]
/// UTF-16 code units (JavaScript's `length`, as the harness counts).
fn label_problem(label: &str) -> Option<String> {
    let length = label.encode_utf16().count();
    if label.contains(['\n', '\r']) {
        Some("must be a single line".to_owned())
    } else if length > MAX_LABEL_LEN {
        Some(format!(
            "must be at most {MAX_LABEL_LEN} characters, got {length}"
        ))
    } else {
        None
    }
}

/// `Number(text)` when it is an integer within `min..=max`.
fn integer_in(text: &str, min: f64, max: f64) -> Option<f64> {
    let value = js_number(text);
    (value.is_finite() && value.fract() == 0.0 && (min..=max).contains(&value)).then_some(value)
}

/// JavaScript's `Number(text)` for a string.
pub fn js_number(text: &str) -> f64 {
    let text = text.trim_matches(is_js_whitespace);
    if text.is_empty() {
        return 0.0;
    }
    for (prefixes, radix) in [(["0x", "0X"], 16), (["0o", "0O"], 8), (["0b", "0B"], 2)] {
        for prefix in prefixes {
            if let Some(digits) = text.strip_prefix(prefix) {
                return radix_number(digits, radix);
            }
        }
    }
    match text {
        "Infinity" | "+Infinity" => return f64::INFINITY,
        "-Infinity" => return f64::NEG_INFINITY,
        _ => {}
    }
    if !is_decimal_literal(text) {
        return f64::NAN;
    }
    text.parse::<f64>().unwrap_or(f64::NAN)
}

/// JavaScript's white space and line terminators (which differ from Unicode's `White_Space`:
/// U+FEFF counts, U+0085 does not).
fn is_js_whitespace(c: char) -> bool {
    c == '\u{feff}' || (c.is_whitespace() && c != '\u{85}')
}

/// Digits of a `0x`/`0o`/`0b` literal; NaN when empty or holding another character. No sign is
/// allowed (`Number("-0x1")` is NaN), and `strip_prefix` has already removed the only place one
/// could be.
fn radix_number(digits: &str, radix: u32) -> f64 {
    if digits.is_empty() {
        return f64::NAN;
    }
    let mut value = 0.0f64;
    for c in digits.chars() {
        match c.to_digit(radix) {
            Some(d) => value = value * f64::from(radix) + f64::from(d),
            None => return f64::NAN,
        }
    }
    value
}

/// `StrDecimalLiteral` of ECMA-262: an optional sign, digits with an optional fraction (at least
/// one digit in all), an optional exponent with at least one digit.
fn is_decimal_literal(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let int_start = i;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    let mut n_digits = i - int_start;
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        n_digits += i - frac_start;
    }
    if n_digits == 0 {
        return false;
    }
    if i < bytes.len() && matches!(bytes[i], b'e' | b'E') {
        i += 1;
        if i < bytes.len() && matches!(bytes[i], b'+' | b'-') {
            i += 1;
        }
        let exp_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp_start {
            return false;
        }
    }
    i == bytes.len()
}
// The price flags (decisions.md#whole-cost): `--sandbox-price TIER=USD_PER_MIN`,
// `--model-price MODEL=USD_PER_RUN` and `--allow-unpriced`, with the same rules for a submitted
// spec's prices and the coordinator's settings. What the prices mean is `crate::pricing`.

/// Reads the price flags into `pricing`, pushing one error per bad entry.
pub fn check_pricing_flags(
    sandbox: &[String],
    model: &[String],
    allow_unpriced: bool,
    pricing: &mut Pricing,
    errors: &mut Vec<FlagError>,
) {
    for entry in sandbox {
        match price_entry("--sandbox-price", entry, "TIER=USD_PER_MIN") {
            Ok((tier, usd)) if Tier::ALL.iter().any(|known| known.as_str() == tier) => {
                pricing.sandbox_usd_per_min.insert(tier, usd);
            }
            Ok((tier, _)) => errors.push(FlagError {
                flag: "--sandbox-price",
                message: format!(
                    "unknown tier {tier:?} in {entry:?}; the tiers are {}",
                    Tier::ALL.map(Tier::as_str).join(", ")
                ),
            }),
            Err(error) => errors.push(error),
        }
    }
    for entry in model {
        match price_entry("--model-price", entry, "MODEL=USD_PER_RUN") {
            Ok((model, usd)) => {
                pricing.model_usd_per_run.insert(model, usd);
            }
            Err(error) => errors.push(error),
        }
    }
    pricing.allow_unpriced = allow_unpriced;
}

/// `NAME=USD` with a non-empty name and a finite price of at least 0.
fn price_entry(flag: &'static str, entry: &str, shape: &str) -> Result<(String, f64), FlagError> {
    let error = |message: String| FlagError { flag, message };
    let Some((name, price)) = entry.split_once('=') else {
        return Err(error(format!("needs {shape}, got {entry:?}")));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(error(format!("needs {shape}, got {entry:?} (no name)")));
    }
    let usd = js_number(price);
    if price.trim().is_empty() || !usd.is_finite() || usd < 0.0 {
        return Err(error(format!(
            "the price in {entry:?} must be a number of at least 0"
        )));
    }
    Ok((name.to_owned(), usd))
}

/// `--sandbox-price` / `--model-price` entries as a map, for settings read outside the batch
/// flags (the coordinator's): the same rules, every problem listed.
pub fn parse_prices(sandbox: &[String], model: &[String]) -> Result<Pricing, Vec<FlagError>> {
    let mut pricing = Pricing::default();
    let mut errors = Vec::new();
    check_pricing_flags(sandbox, model, false, &mut pricing, &mut errors);
    if errors.is_empty() {
        Ok(pricing)
    } else {
        Err(errors)
    }
}

/// A submitted spec's prices held to the flags' rules: known tiers, names, finite prices of at
/// least 0.
pub fn check_spec_pricing(pricing: &Pricing) -> Vec<String> {
    let mut problems = Vec::new();
    for (tier, usd) in &pricing.sandbox_usd_per_min {
        if !Tier::ALL.iter().any(|known| known.as_str() == tier) {
            problems.push(format!(
                "spec.flags.pricing.sandboxUsdPerMin: unknown tier {tier:?}"
            ));
        }
        if !usd.is_finite() || *usd < 0.0 {
            problems.push(format!(
                "spec.flags.pricing.sandboxUsdPerMin.{tier}: must be a number of at least 0, got {usd}"
            ));
        }
    }
    for (model, usd) in &pricing.model_usd_per_run {
        if model.trim().is_empty() {
            problems.push("spec.flags.pricing.modelUsdPerRun: a model name is empty".to_owned());
        }
        if !usd.is_finite() || *usd < 0.0 {
            problems.push(format!(
                "spec.flags.pricing.modelUsdPerRun.{model}: must be a number of at least 0, got {usd}"
            ));
        }
    }
    problems
}
