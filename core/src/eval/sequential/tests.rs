use super::*;
use crate::eval::{ArmOutcome, mcnemar_score};

#[test]
fn looks_are_equally_spaced_in_pairs_and_never_repeat() {
    assert_eq!(look_points(200, 5), [40, 80, 120, 160, 200]);
    assert_eq!(look_points(10, 3), [4, 7, 10]);
    assert_eq!(
        look_points(3, 5),
        [1, 2, 3],
        "more looks than pairs: a look per pair"
    );
    assert_eq!(look_points(7, 1), [7]);
    assert!(look_points(0, 5).is_empty());
}

#[test]
fn the_evidence_is_the_uniform_mixture_likelihood_ratio() {
    // E(0, 0) = 1: no disagreement is no evidence.
    assert!(log_evidence(0, 0).abs() < 1e-12);
    // E(0, 1) = 2 · 1 / 2 = 1; E(0, 2) = 4 · 2 / 6 = 4/3.
    assert!(log_evidence(0, 1).abs() < 1e-12);
    assert!((log_evidence(0, 2).exp() - 4.0 / 3.0).abs() < 1e-12);
    // Symmetric, and a tie never counts as evidence.
    assert_eq!(log_evidence(3, 9), log_evidence(9, 3));
    for b in 0..60 {
        assert!(log_evidence(b, b) <= 1e-12, "E({b}, {b}) ≥ 1");
    }
    // Stirling's series meets the exact sum.
    for n in [32_u64, 40, 300] {
        let exact: f64 = (2..=n).map(|k| (k as f64).ln()).sum();
        assert!((ln_factorial(n) - exact).abs() < 1e-10, "ln {n}!");
    }
}

#[test]
fn the_test_rejects_at_one_over_alpha() {
    // All one way: E(0, c) = 2^c / (c + 1) reaches 20 at c = 8 (256 / 9 ≈ 28.4; c = 7 gives
    // 16).
    assert!(!rejects(0, 7, 0.05));
    assert!(rejects(0, 8, 0.05));
    assert!(rejects(8, 0, 0.05));
    assert_eq!(
        decide_at_look((0, 8), 20, 100, 0.05, None),
        SequentialDecision::Decided {
            verdict: EvalVerdict::BBetter
        }
    );
    assert_eq!(
        // E(12, 1) = 2^13 · 12! / 14! = 8192 / 182 ≈ 45.
        decide_at_look((12, 1), 20, 100, 0.05, None),
        SequentialDecision::Decided {
            verdict: EvalVerdict::BWorse
        }
    );
    assert_eq!(
        decide_at_look((2, 3), 20, 100, 0.05, None),
        SequentialDecision::Continue
    );
}

#[test]
fn futility_asks_whether_the_remaining_pairs_could_still_reject() {
    // 5 pairs left: even 5 more B-only passes on (3, 3) give E(3, 8) < 20.
    assert!(!rejects(3, 8, 0.05) && !rejects(8, 3, 0.05));
    assert_eq!(
        decide_at_look((3, 3), 95, 100, 0.05, None),
        SequentialDecision::Futile
    );
    // With 40 left it could.
    assert_eq!(
        decide_at_look((3, 3), 60, 100, 0.05, None),
        SequentialDecision::Continue
    );
    // With --mde 10 points only ⌈40 · 0.1⌉ = 4 more one-way pairs count: (3, 7) cannot reject.
    assert!(!rejects(3, 7, 0.05));
    assert_eq!(
        decide_at_look((3, 3), 60, 100, 0.05, Some(0.1)),
        SequentialDecision::Futile
    );
    // At the last look nothing remains: continue is no longer an answer.
    assert_eq!(
        decide_at_look((0, 0), 100, 100, 0.05, None),
        SequentialDecision::Futile
    );
}

#[test]
fn the_first_look_that_decides_is_the_stop() {
    let settings = SequentialSettings {
        looks: 5,
        alpha: 0.05,
        mde: None,
    };
    // B passes and A fails in every pair: look 1 holds 4 pairs (E = 16/5), look 2 holds 8
    // (E = 256/9 ≥ 20).
    let ordered = vec![Some((false, true)); 20];
    let stop = first_stop(&ordered, 20, &settings).expect("decides");
    assert_eq!((stop.look, stop.pairs, stop.last), (2, 8, false));
    assert_eq!(stop.discordant.a_fail_b_pass, 8);
    // Too few outcomes for the second look: no stop yet.
    assert_eq!(first_stop(&ordered[..7], 20, &settings), None);
    // All agree: at look 4 the 4 pairs left could give at most E(0, 4) = 16/5, so it is futile.
    let agree = vec![Some((true, true)); 20];
    let stop = first_stop(&agree, 20, &settings).expect("futile");
    assert_eq!((stop.look, stop.last), (4, false));
    assert_eq!(stop.decision, SequentialDecision::Futile);
    // With one look, only the last look ends it.
    let one_look = SequentialSettings {
        looks: 1,
        ..settings
    };
    let stop = first_stop(&agree, 20, &one_look).expect("the last look decides");
    assert_eq!((stop.look, stop.last), (1, true));
}

fn run(pass: bool, cost: f64) -> ArmOutcome {
    ArmOutcome {
        pass,
        completed: true,
        cost_usd: Some(cost),
    }
}

fn not_run() -> ArmOutcome {
    ArmOutcome {
        pass: false,
        completed: false,
        cost_usd: None,
    }
}

#[test]
fn the_summary_replays_the_looks_in_admission_order_and_prices_the_saved_runs() {
    // Two scenarios × 10 runs; the first 2 repeats (4 pairs) ran and B won each; nothing after.
    let scenarios = ["s1".to_owned(), "s2".to_owned()];
    let mut pairs = Vec::new();
    for scenario in &scenarios {
        for repeat_index in 0..10 {
            let (a, b) = if repeat_index < 4 {
                (run(false, 0.5), run(true, 0.5))
            } else {
                (not_run(), not_run())
            };
            pairs.push(PairedOutcome {
                scenario: scenario.clone(),
                repeat_index,
                a,
                b,
            });
        }
    }
    let settings = SequentialSettings {
        looks: 5,
        alpha: 0.05,
        mde: None,
    };
    let summary = sequential_summary(&pairs, &scenarios, &settings);
    assert_eq!(summary.look_pairs, [4, 8, 12, 16, 20]);
    // Look 2 = repeats 0..4 of both scenarios = 8 pairs, all B-only.
    assert_eq!(summary.stopped_at_look, 2);
    assert_eq!(summary.pairs_at_look, 8);
    assert_eq!(summary.reason, SequentialReason::Decided);
    assert_eq!(summary.verdict, EvalVerdict::BBetter);
    assert_eq!((summary.planned_runs, summary.runs), (40, 16));
    assert_eq!(summary.runs_saved, 24);
    assert_eq!(summary.cost_saved_usd, Some(12.0));
    assert_eq!(
        summary_line(&summary),
        "stopped at look 2 of 5 after 8 of 20 pairs: B better; saved 24 runs (~$12.00)"
    );
}

/// A seeded PRNG for the simulations (SplitMix64): the core takes no randomness crate.
struct SplitMix(u64);

impl SplitMix {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1_u64 << 53) as f64
    }
}

/// What a batch of simulated evals did.
#[derive(Debug)]
pub(super) struct Simulated {
    /// Share of evals whose sequential verdict was not "no detectable difference".
    pub rejected: f64,
    /// Mean pairs at the stopping look.
    pub mean_pairs: f64,
    /// Share of evals the fixed design (McNemar's score test over every pair) rejected.
    pub fixed_rejected: f64,
}

/// `evals` simulated evals of `pairs` independent pairs, arm A passing with `pass_a` and arm B
/// with `pass_b`.
pub(super) fn simulate(
    (pass_a, pass_b): (f64, f64),
    pairs: u64,
    settings: &SequentialSettings,
    evals: u32,
    seed: u64,
) -> Simulated {
    let mut rng = SplitMix(seed);
    let (mut rejected, mut stopped_pairs, mut fixed_rejected) = (0_u32, 0_u64, 0_u32);
    let mut outcomes = Vec::with_capacity(pairs as usize);
    for _ in 0..evals {
        outcomes.clear();
        let (mut b, mut c) = (0, 0);
        for _ in 0..pairs {
            let pair = (rng.next_f64() < pass_a, rng.next_f64() < pass_b);
            b += u64::from(pair == (true, false));
            c += u64::from(pair == (false, true));
            outcomes.push(Some(pair));
        }
        let stop = first_stop(&outcomes, pairs, settings).expect("the last look decides");
        stopped_pairs += stop.pairs;
        rejected += u32::from(matches!(stop.decision, SequentialDecision::Decided { .. }));
        fixed_rejected += u32::from(mcnemar_score(b, c) < settings.alpha);
    }
    Simulated {
        rejected: f64::from(rejected) / f64::from(evals),
        mean_pairs: stopped_pairs as f64 / f64::from(evals),
        fixed_rejected: f64::from(fixed_rejected) / f64::from(evals),
    }
}

/// Three Monte Carlo standard errors above `alpha` for `evals` evals.
fn type_one_ceiling(alpha: f64, evals: u32) -> f64 {
    alpha + 3.0 * (alpha * (1.0 - alpha) / f64::from(evals)).sqrt()
}

const FIVE_LOOKS: SequentialSettings = SequentialSettings {
    looks: 5,
    alpha: 0.05,
    mde: None,
};

#[test]
fn under_no_difference_the_type_one_error_stays_below_alpha() {
    for (pass, seed) in [(0.5, 1), (0.8, 2)] {
        let null = simulate((pass, pass), 100, &FIVE_LOOKS, 10_000, seed);
        assert!(
            null.rejected <= type_one_ceiling(0.05, 10_000),
            "pass rate {pass}: {null:?}"
        );
    }
    // Looking after every pair is still valid (Ville's inequality holds at any stopping time).
    let every_pair = SequentialSettings {
        looks: 100,
        ..FIVE_LOOKS
    };
    let null = simulate((0.5, 0.5), 100, &every_pair, 10_000, 3);
    assert!(null.rejected <= type_one_ceiling(0.05, 10_000), "{null:?}");
}

#[test]
fn a_planted_difference_stops_early_with_most_of_the_fixed_designs_power() {
    let planted = simulate((0.5, 0.75), 100, &FIVE_LOOKS, 4_000, 4);
    // The fixed design has about 96% power here; the sequential test about 75%, stopping after
    // about 73 pairs on average (docs/benchmarks.md).
    assert!(planted.rejected > 0.65, "{planted:?}");
    assert!(planted.fixed_rejected > 0.9, "{planted:?}");
    assert!(planted.mean_pairs < 80.0, "{planted:?}");
    let large = simulate((0.3, 0.9), 200, &FIVE_LOOKS, 2_000, 5);
    assert!(large.rejected > 0.99, "{large:?}");
    assert!(large.mean_pairs < 50.0, "{large:?}");
}

/// One row of the design table: pass rates, planned pairs, looks, `--mde`.
type DesignCase = ((f64, f64), u64, u32, Option<f64>);

/// The numbers of docs/benchmarks.md: `cargo test -p cowork-core --lib
/// eval::sequential::tests::sequential_design_table -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: prints the table of docs/benchmarks.md"]
fn sequential_design_table() {
    let evals = 100_000;
    println!(
        "| pass A | pass B | pairs | looks | mde | sequential rejects | mean pairs at stop | fixed rejects |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let cases: [DesignCase; 8] = [
        ((0.5, 0.5), 100, 5, None),
        ((0.8, 0.8), 100, 5, None),
        ((0.5, 0.5), 100, 100, None),
        ((0.5, 0.5), 100, 5, Some(0.2)),
        ((0.5, 0.75), 100, 5, None),
        ((0.5, 0.75), 100, 5, Some(0.2)),
        ((0.5, 0.75), 200, 5, None),
        ((0.3, 0.9), 200, 5, None),
    ];
    for (seed, (rates, pairs, looks, mde)) in (10_u64..).zip(cases) {
        let settings = SequentialSettings {
            looks,
            alpha: 0.05,
            mde,
        };
        let result = simulate(rates, pairs, &settings, evals, seed);
        let mde = mde.map_or("-".to_owned(), |mde| format!("{}", mde * 100.0));
        println!(
            "| {} | {} | {pairs} | {looks} | {mde} | {:.4} | {:.1} | {:.4} |",
            rates.0, rates.1, result.rejected, result.mean_pairs, result.fixed_rejected
        );
    }
}
