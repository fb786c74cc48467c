//! The simulator's randomness: FNV-1a over a job's outcome inputs seeds an inline SplitMix64, so
//! the stream of a job never changes with the batch, the worker, the clock or a dependency.

use cowork_schema::ids::UnitRef;
use cowork_schema::job::JobSpec;

/// Mixed into the seed of the fault-injection stream (usage limits, infra failures).
pub(super) const FAULT_STREAM_SALT: u64 = 0xfa17_5eed_0bad_c0de;

/// Version tag hashed ahead of the inputs, so that a deliberate change of the model can change
/// every stream at once.
const STREAM_TAG: &[u8] = b"cowork-fleet-sim/v1";

/// FNV-1a, 64 bit.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fnv1a(pub(super) u64);

impl Fnv1a {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    pub(super) fn new() -> Fnv1a {
        Fnv1a(Fnv1a::OFFSET_BASIS)
    }

    pub(super) fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(Fnv1a::PRIME);
        }
    }

    /// Writes a length-prefixed string so that ("ab", "c") and ("a", "bc") hash differently.
    fn write_str(&mut self, text: &str) {
        self.write(&(text.len() as u64).to_le_bytes());
        self.write(text.as_bytes());
    }

    /// Writes a presence tag and then the value, so that `None` and `Some("")` differ.
    fn write_opt_str(&mut self, text: Option<&str>) {
        match text {
            None => self.write(&[0]),
            Some(text) => {
                self.write(&[1]);
                self.write_str(text);
            }
        }
    }
}

/// SplitMix64 (Steele, Lea and Flood), a small generator with a good 64-bit mix.
#[derive(Clone, Debug)]
pub(super) struct SplitMix64(pub(super) u64);

impl SplitMix64 {
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1) with 53 bits of precision.
    pub(super) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform draw in `0..n` (`n > 0`); the modulo bias is below 2^-40 for the small `n`
    /// used here.
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The generator of one job, seeded from the inputs that define its outcome.
pub(super) fn job_stream(seed: u64, job: &JobSpec) -> SplitMix64 {
    let mut hash = Fnv1a::new();
    hash.write(STREAM_TAG);
    hash.write(&seed.to_le_bytes());
    hash.write_str(&job.scenario_name);
    let axes = job.axes.as_ref();
    hash.write_opt_str(axes.and_then(|axes| axes.baseline.as_deref()));
    hash.write_opt_str(axes.and_then(|axes| axes.model.as_deref()));
    hash.write_opt_str(axes.and_then(|axes| axes.skill_dir.as_deref()));
    hash.write_opt_str(job.arm.as_deref());
    match job.unit {
        UnitRef::File(index) => {
            hash.write(b"f");
            hash.write(&index.to_le_bytes());
        }
        UnitRef::Cell(index) => {
            hash.write(b"c");
            hash.write(&index.to_le_bytes());
        }
    }
    match job.repeat_index {
        None => hash.write(&[0]),
        Some(index) => {
            hash.write(&[1]);
            hash.write(&index.to_le_bytes());
        }
    }
    SplitMix64(hash.0)
}
