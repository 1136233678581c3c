//! Hostile calls for the robustness suites (`tests/validation_props.rs` with
//! proptest, `fuzz/` with cargo fuzz): call descriptions generated from a
//! stream of choices, run inside guarded buffers, and checked against a model
//! of the validation rules written from SPEC §3–§5 independently of the crate.
//!
//! - [`Choices`]: where a generator's decisions come from (a proptest list of
//!   numbers, a fuzzer's bytes). Choice `0` is always the plainest one, so an
//!   exhausted source, or one shrunk towards zeros, gives a simple valid call.
//! - [`GumbelCall`], [`RejectionCall`]: a call with every input and output
//!   length, shape, stride, slot, offset, draft id, temperature and filter
//!   value (SPEC §7.1) possibly wrong; [`GumbelCall::check`] and
//!   [`RejectionCall::check`] run it on the CPU backend and panic on any
//!   broken property:
//!   - the call does not panic (`catch_unwind`), and it is `Ok` exactly when
//!     the model says the call is valid (interleaved but disjoint draft-logits
//!     layouts included); a call that only a bad filter value of a used slot
//!     makes invalid fails with that value's typed error (`InvalidTopK`,
//!     `InvalidTopP`, `InvalidMinP` with its slot, value and table);
//!   - canaries before and after every buffer are intact (nothing outside the
//!     regions passed is written) and inputs are unchanged;
//!   - a failed call wrote nothing; an `Ok` call wrote every output element,
//!     each in range (`0..V`, or `-1` where documented), the draft logits exactly
//!     where SPEC §3.3 says, greedy rows their argmax, filtered sampling rows
//!     ids of their kept set (`filters::reference_kept`);
//!   - an `Ok` call run again gives bitwise the same outputs, and the same
//!     tokens with the other token width.

use crate::batch::{Batch, ColumnSpec, DraftLogitsSpec, Values};
use crate::filters::{FilterTable, reference_kept};
use crate::inputs::{Rng, first_argmax};
use crate::verify::Verify;
use half::{bf16, f16};
use specdec::filter::Filter;
use specdec::shard::{InProcess, Shard};
use specdec::status::{NAN_LOGITS, temperature_is_valid};
use specdec::{
    Backend, Column, DType, Distribution, DraftLogits, DraftLogitsMut, DraftLogitsShape, Error, Filters, GumbelOutput,
    GumbelSample, Host, Logits, Logprobs, MAX_DRAFTS, MAX_TOP_LOGPROBS, MAX_VOCAB, RejectionOutput, RejectionSample,
    SamplingParams, Verification,
};
use std::panic::{AssertUnwindSafe, catch_unwind};

// --- Choices ------------------------------------------------------------------

/// A source of decisions for the generators.
pub trait Choices {
    /// A number in `0..n` (`n >= 1`). `0` is the plainest choice, and what a
    /// source that has run dry answers.
    fn below(&mut self, n: u64) -> u64;
}

/// Choices read from a list of numbers (each taken modulo the range asked
/// for), `0` once the list is used up. Proptest generates and shrinks the list.
#[derive(Debug)]
pub struct ChoiceList<'a> {
    list: &'a [u64],
    next: usize,
}

impl<'a> ChoiceList<'a> {
    pub fn new(list: &'a [u64]) -> Self {
        ChoiceList { list, next: 0 }
    }
}

impl Choices for ChoiceList<'_> {
    fn below(&mut self, n: u64) -> u64 {
        let x = self.list.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        x % n
    }
}

/// Derived decisions.
trait Decide: Choices {
    fn upto(&mut self, n: usize) -> usize {
        self.below(n as u64 + 1) as usize
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    /// An index into `weights`, each chosen with probability proportional to
    /// its weight; index 0 is the plainest.
    fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut x = self.below(weights.iter().sum());
        for (i, &w) in weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        unreachable!("x < sum of weights")
    }

    /// True one time in `n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == n - 1
    }

    fn bits(&mut self) -> u64 {
        self.below(u64::MAX)
    }

    /// Mostly `len`, sometimes one or two off (a length mismatch).
    fn len_near(&mut self, len: usize) -> usize {
        match self.weighted(&[24, 1, 1]) {
            0 => len,
            1 => len + 1,
            _ => len.checked_sub(1).unwrap_or(2),
        }
    }
}

impl<C: Choices + ?Sized> Decide for C {}

// --- Guarded buffers ------------------------------------------------------------

/// Elements of canary before and after every buffer a call sees.
pub const GUARD: usize = 16;

/// Values compared bit for bit, with a canary no call writes.
pub trait Guard: Copy + std::fmt::Debug {
    const CANARY: Self;
    fn bits(self) -> u64;
}

macro_rules! guard {
    ($($t:ty => $canary:expr, |$x:ident| $bits:expr;)*) => {$(
        impl Guard for $t {
            const CANARY: Self = $canary;
            fn bits(self) -> u64 {
                let $x = self;
                $bits
            }
        }
    )*};
}

// Float canaries are NaNs with payloads no conversion produces.
guard! {
    f32 => f32::from_bits(0x7fa5_a5a5), |x| x.to_bits() as u64;
    bf16 => bf16::from_bits(0x7fa5), |x| x.to_bits() as u64;
    f16 => f16::from_bits(0x7da5), |x| x.to_bits() as u64;
    i32 => 0x5a5a_5a5a, |x| x as u32 as u64;
    i64 => 0x5a5a_5a5a_5a5a_5a5a, |x| x as u64;
    u32 => 0xa5a5_a5a5, |x| x as u64;
    u64 => 0xa5a5_a5a5_a5a5_a5a5, |x| x;
}

/// A region inside a larger buffer, with [`GUARD`] canaries on each side.
#[derive(Clone, Debug)]
pub struct Guarded<T> {
    buf: Vec<T>,
    len: usize,
}

impl<T: Guard> Guarded<T> {
    pub fn new(region: &[T]) -> Self {
        let mut buf = vec![T::CANARY; GUARD];
        buf.extend_from_slice(region);
        buf.extend(std::iter::repeat_n(T::CANARY, GUARD));
        Guarded { buf, len: region.len() }
    }

    pub fn filled(len: usize, fill: T) -> Self {
        Self::new(&vec![fill; len])
    }

    pub fn region(&self) -> &[T] {
        &self.buf[GUARD..GUARD + self.len]
    }

    pub fn region_mut(&mut self) -> &mut [T] {
        &mut self.buf[GUARD..GUARD + self.len]
    }

    /// Panics unless both canaries are intact.
    pub fn assert_intact(&self, what: &str) {
        let (head, tail) = (&self.buf[..GUARD], &self.buf[GUARD + self.len..]);
        for (side, part) in [("before", head), ("after", tail)] {
            if let Some(i) = part.iter().position(|x| x.bits() != T::CANARY.bits()) {
                panic!("{what}: the canary {side} the buffer was overwritten at {i}: {:?}", part[i]);
            }
        }
    }

    /// Panics unless the region still holds `want`, bit for bit.
    pub fn assert_holds(&self, want: &[T], what: &str) {
        self.assert_intact(what);
        if let Some(i) = (0..self.len).find(|&i| self.region()[i].bits() != want[i].bits()) {
            panic!("{what}: element {i} changed from {:?} to {:?}", want[i], self.region()[i]);
        }
    }
}

/// A guarded buffer of logits or draft-logits elements.
#[derive(Clone, Debug)]
enum GuardedValues {
    F32(Guarded<f32>),
    BF16(Guarded<bf16>),
    F16(Guarded<f16>),
}

impl GuardedValues {
    fn new(v: &Values) -> Self {
        match v {
            Values::F32(v) => GuardedValues::F32(Guarded::new(v)),
            Values::BF16(v) => GuardedValues::BF16(Guarded::new(v)),
            Values::F16(v) => GuardedValues::F16(Guarded::new(v)),
        }
    }

    /// The region as a call reads it (as [`Values::view`]).
    fn view(&self) -> specdec::Values<'_, Host> {
        match self {
            GuardedValues::F32(g) => specdec::Values::F32(g.region()),
            GuardedValues::BF16(g) => specdec::Values::BF16(g.region()),
            GuardedValues::F16(g) => specdec::Values::F16(g.region()),
        }
    }

    /// The region as a call writes it (as [`Values::view_mut`]).
    fn view_mut(&mut self) -> specdec::ValuesMut<'_, Host> {
        match self {
            GuardedValues::F32(g) => specdec::ValuesMut::F32(g.region_mut()),
            GuardedValues::BF16(g) => specdec::ValuesMut::BF16(g.region_mut()),
            GuardedValues::F16(g) => specdec::ValuesMut::F16(g.region_mut()),
        }
    }

    fn assert_intact(&self, what: &str) {
        match self {
            GuardedValues::F32(g) => g.assert_intact(what),
            GuardedValues::BF16(g) => g.assert_intact(what),
            GuardedValues::F16(g) => g.assert_intact(what),
        }
    }

    /// The region's contents.
    fn values(&self) -> Values {
        match self {
            GuardedValues::F32(g) => Values::F32(g.region().to_vec()),
            GuardedValues::BF16(g) => Values::BF16(g.region().to_vec()),
            GuardedValues::F16(g) => Values::F16(g.region().to_vec()),
        }
    }
}

/// Guarded token outputs, filled with `MIN` (never a token nor `-1`).
#[derive(Clone, Debug)]
enum GuardedTokens {
    I32(Guarded<i32>),
    I64(Guarded<i64>),
}

impl GuardedTokens {
    fn new(len: usize, i64: bool) -> Self {
        if i64 {
            GuardedTokens::I64(Guarded::filled(len, i64::MIN))
        } else {
            GuardedTokens::I32(Guarded::filled(len, i32::MIN))
        }
    }

    /// A `gumbel_sample` output of these tokens alone.
    fn gumbel_output(&mut self) -> GumbelOutput<'_, Host> {
        match self {
            GuardedTokens::I32(g) => GumbelOutput::new(g.region_mut()),
            GuardedTokens::I64(g) => GumbelOutput::new(g.region_mut()),
        }
    }

    /// A `rejection_sample` output of these tokens and `num_emitted` alone.
    fn rejection_output<'a>(&'a mut self, num_emitted: &'a mut [i32]) -> RejectionOutput<'a, Host> {
        match self {
            GuardedTokens::I32(g) => RejectionOutput::new(g.region_mut(), num_emitted),
            GuardedTokens::I64(g) => RejectionOutput::new(g.region_mut(), num_emitted),
        }
    }

    /// The tokens widened to i64, with the fill value mapped to `i64::MIN`.
    fn tokens(&self, what: &str) -> Vec<i64> {
        match self {
            GuardedTokens::I32(g) => {
                g.assert_intact(what);
                g.region().iter().map(|&t| if t == i32::MIN { i64::MIN } else { t as i64 }).collect()
            }
            GuardedTokens::I64(g) => {
                g.assert_intact(what);
                g.region().to_vec()
            }
        }
    }
}

/// An optional guarded output, filled with `fill`.
fn guarded_out<T: Guard>(len: Option<usize>, fill: T) -> Option<Guarded<T>> {
    len.map(|n| Guarded::filled(n, fill))
}

/// Reads an optional guarded output back, checking its canaries.
fn read_out<T: Guard>(g: &Option<Guarded<T>>, what: &str) -> Option<Vec<T>> {
    g.as_ref().map(|g| {
        g.assert_intact(what);
        g.region().to_vec()
    })
}

/// A filter table's arrays, each guarded (absent ones stay absent).
struct GuardedFilters {
    top_k: Option<Guarded<i32>>,
    top_p: Option<Guarded<f32>>,
    min_p: Option<Guarded<f32>>,
}

impl GuardedFilters {
    fn new(t: &FilterTable) -> Self {
        GuardedFilters {
            top_k: t.top_k.as_deref().map(Guarded::new),
            top_p: t.top_p.as_deref().map(Guarded::new),
            min_p: t.min_p.as_deref().map(Guarded::new),
        }
    }

    /// The regions as a call reads them (as [`FilterTable::view`]).
    fn view(&self) -> Filters<'_, Host> {
        let mut f = Filters::none();
        if let Some(k) = &self.top_k {
            f = f.with_top_k(k.region());
        }
        if let Some(p) = &self.top_p {
            f = f.with_top_p(p.region());
        }
        if let Some(m) = &self.min_p {
            f = f.with_min_p(m.region());
        }
        f
    }

    /// Panics unless every array still holds `t`'s values and its canaries.
    fn assert_holds(&self, t: &FilterTable, what: &str) {
        if let (Some(g), Some(k)) = (&self.top_k, &t.top_k) {
            g.assert_holds(k, &format!("{what} top_k"));
        }
        if let (Some(g), Some(p)) = (&self.top_p, &t.top_p) {
            g.assert_holds(p, &format!("{what} top_p"));
        }
        if let (Some(g), Some(m)) = (&self.min_p, &t.min_p) {
            g.assert_holds(m, &format!("{what} min_p"));
        }
    }
}

/// Runs `call`, turning a panic into a test failure that names `what` and
/// shows the call (`ctx`).
fn no_panic<R>(what: &str, ctx: &dyn std::fmt::Debug, call: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            panic!("{what}: the call panicked instead of returning an error: {msg}\n{ctx:#?}")
        }
    }
}

// --- Generators -----------------------------------------------------------------

/// Most rows (and requests) a generated call has.
pub const MAX_ROWS: usize = 16;
/// Largest valid vocabulary generated.
pub const MAX_GEN_VOCAB: usize = 64;
/// Buffers whose shape would need more elements than this get a short buffer
/// instead (the call must then fail).
const ALLOC_LIMIT: usize = 1 << 16;

/// `(n - 1)·stride + width` elements, as the shape checks count them (`None` on overflow).
fn extent(n: usize, stride: usize, width: usize) -> Option<usize> {
    match n {
        0 => Some(0),
        _ => (n - 1).checked_mul(stride)?.checked_add(width),
    }
}

fn vocab(c: &mut impl Choices) -> usize {
    match c.weighted(&[40, 1, 1]) {
        0 => 1 + c.upto(MAX_GEN_VOCAB - 1),
        1 => 0,
        _ => MAX_VOCAB + 1,
    }
}

/// Dense, padded, broadcast (0), overlapping (< vocab) or overflowing.
fn row_stride(c: &mut impl Choices, vocab: usize) -> usize {
    match c.weighted(&[12, 4, 2, 2, 1]) {
        0 => vocab,
        1 => vocab + 1 + c.upto(3),
        2 => 0,
        3 => c.upto(vocab),
        _ => c.pick(&[usize::MAX, usize::MAX / 2, 1 << 40]),
    }
}

/// A buffer length for a shape that needs `needed` elements (`None`: more
/// than fits in `usize`): mostly exact, sometimes longer, sometimes short.
fn buffer_len(c: &mut impl Choices, needed: Option<usize>) -> usize {
    match needed {
        Some(n) if n <= ALLOC_LIMIT => match c.weighted(&[16, 3, 1]) {
            0 => n,
            1 => n + 1 + c.upto(4),
            _ => n.saturating_sub(1 + c.upto(2)),
        },
        _ => c.upto(8),
    }
}

/// `len` values of `dtype`: half-integers in `[-8, 8]` (ties are common),
/// with `-inf`, `+inf`, NaN, huge, subnormal and zero values mixed in at a
/// rate the choices pick (none, rare or often).
fn values(c: &mut impl Choices, dtype: DType, len: usize) -> Values {
    let rate = c.pick(&[0, 40, 4]);
    let mut rng = Rng::new(c.bits());
    let xs: Vec<f32> = (0..len)
        .map(|_| {
            if rate == 0 || rng.below(rate) != 0 {
                return (rng.below(33) as f32 - 16.0) / 2.0;
            }
            match rng.below(9) {
                0 | 1 => f32::NEG_INFINITY,
                2 => f32::INFINITY,
                3 => f32::NAN,
                4 => f32::from_bits(0xffc0_0001), // a NaN with a payload and the sign set
                5 => rng.pick(&[3.0e38, -3.0e38, f32::MAX, f32::MIN]),
                6 => rng.pick(&[1.0e-40, -1.0e-45, f32::MIN_POSITIVE]),
                7 => rng.pick(&[0.0, -0.0]),
                _ => rng.uniform(-100.0, 100.0),
            }
        })
        .collect();
    Values::from_f32(dtype, &xs)
}

/// A temperature: mostly greedy or ordinary, sometimes an edge that is
/// valid (`-0`, the smallest normal, `f32::MAX`) or invalid (NaN, ±inf,
/// negative, subnormal).
fn temperature(c: &mut impl Choices) -> f32 {
    const ORDINARY: [f32; 6] = [0.25, 0.6, 1.0, 1.5, 2.5, 1.0e-30];
    const EDGES: [f32; 10] = [
        -0.0,
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -1.0,
        1.0e-40,
        f32::from_bits(1),
        -f32::MIN_POSITIVE,
    ];
    match c.weighted(&[14, 28, 10]) {
        0 => 0.0,
        1 => c.pick(&ORDINARY),
        _ => c.pick(&EDGES),
    }
}

/// The slot table: temperatures, and seeds (sometimes of another length).
fn table(c: &mut impl Choices) -> (Vec<f32>, Vec<u64>) {
    let num_slots = if c.one_in(16) { 0 } else { 1 + c.upto(5) };
    let temperature: Vec<f32> = (0..num_slots).map(|_| temperature(c)).collect();
    let seeds = c.len_near(num_slots);
    let seed = (0..seeds).map(|_| c.bits()).collect();
    (temperature, seed)
}

/// A row's or request's slot: mostly valid, sometimes padding or out of range.
fn slot(c: &mut impl Choices, num_slots: usize) -> i32 {
    match c.weighted(&[20, 3, 1]) {
        0 if num_slots > 0 => c.below(num_slots as u64) as i32,
        0 | 1 => -1,
        _ => c.pick(&[num_slots as i32, num_slots as i32 + 7, -2, i32::MIN, i32::MAX]),
    }
}

fn positions(c: &mut impl Choices, len: usize) -> Vec<u64> {
    let mut rng = Rng::new(c.bits());
    (0..len).map(|_| if rng.below(4) == 0 { u64::MAX - rng.below(3) as u64 } else { rng.next_u64() }).collect()
}

/// A slot's `top_k`: mostly off or a count (`>= V` too), sometimes negative.
fn top_k(c: &mut impl Choices) -> i32 {
    match c.weighted(&[12, 1]) {
        0 => c.pick(&[0, 1, 2, 5, 64, 1 << 20, i32::MAX]),
        _ => c.pick(&[-1, -7, i32::MIN]),
    }
}

/// A slot's `top_p`: mostly off or in `(0, 1]` (edges: the smallest
/// subnormal, the largest value below 1), sometimes outside (NaN included).
fn top_p(c: &mut impl Choices) -> f32 {
    match c.weighted(&[12, 1]) {
        0 => c.pick(&[1.0, 0.9, 0.5, 0.1, 1.0f32.next_down(), f32::MIN_POSITIVE, f32::from_bits(1)]),
        _ => c.pick(&[0.0, -0.0, -0.5, 1.0f32.next_up(), 1.5, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]),
    }
}

/// A slot's `min_p`: mostly off or in `[0, 1]` (`-0` and subnormals
/// included), sometimes outside (NaN included).
fn min_p(c: &mut impl Choices) -> f32 {
    match c.weighted(&[12, 1]) {
        0 => c.pick(&[0.0, 0.05, 0.3, 1.0, -0.0, f32::from_bits(1), 1.0f32.next_down()]),
        _ => c.pick(&[-0.1, -f32::from_bits(1), 1.0f32.next_up(), 1.5, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]),
    }
}

/// A filter table for `num_slots` slots: none half the time (the plainest
/// choice); else each array given or not, its length rarely one off.
fn filter_table<C: Choices>(c: &mut C, num_slots: usize) -> FilterTable {
    if c.below(2) == 0 {
        return FilterTable::none();
    }
    fn array<C: Choices, T>(c: &mut C, num_slots: usize, value: impl Fn(&mut C) -> T) -> Option<Vec<T>> {
        (c.below(2) == 1).then(|| {
            let len = match c.weighted(&[40, 1, 1]) {
                0 => num_slots,
                1 => num_slots + 1,
                _ => num_slots.checked_sub(1).unwrap_or(1),
            };
            (0..len).map(|_| value(c)).collect()
        })
    }
    FilterTable {
        top_k: array(c, num_slots, |c| top_k(c)),
        top_p: array(c, num_slots, |c| top_p(c)),
        min_p: array(c, num_slots, |c| min_p(c)),
    }
}

/// A draft-logits shape over `slots` slots and `k` columns of rows at
/// least `vocab` wide, and its buffer length: dense, padded, transposed,
/// zero or overlapping strides, strides that overflow, slots, columns and
/// width sometimes one off.
fn draft_layout(c: &mut impl Choices, slots: usize, k: usize, vocab: usize) -> (DraftLogitsShape, usize) {
    let slots = match c.weighted(&[12, 3, 1]) {
        0 => slots,
        1 => slots + 1 + c.upto(1),
        _ => slots.saturating_sub(1),
    };
    let width = match c.weighted(&[10, 4, 1]) {
        0 => vocab,
        1 => vocab + 1 + c.upto(2),
        _ => vocab.saturating_sub(1),
    };
    let (stride0, stride1) = match c.weighted(&[8, 4, 4, 1, 1, 2, 2, 1]) {
        0 => (k * width, width),
        1 => {
            let s1 = width + 1 + c.upto(2);
            (k * s1 + c.upto(3), s1)
        }
        2 => {
            let s0 = width + c.upto(1);
            (s0, slots * s0 + c.upto(2))
        }
        3 => (0, width),
        4 => (k * width, 0),
        5 => (k * width, c.upto(width.saturating_sub(1))),
        6 => (c.upto(2 * k * width), c.upto(2 * width)),
        _ => (c.pick(&[usize::MAX, usize::MAX / 2, 1 << 40]), width),
    };
    let shape = DraftLogitsShape { slots, k, width, stride0, stride1 };
    let needed = extent(slots, stride0, 0).and_then(|a| extent(k, stride1, width).and_then(|b| a.checked_add(b)));
    (shape, buffer_len(c, needed))
}

// --- The model of the checks (SPEC §3–§5) ---------------------------------------

/// Whether a draft-logits shape is acceptable for `vocab` and `num_slots` slots over
/// a buffer of `len` elements: wide enough, enough slots, at least one
/// column, within the buffer, and its rows [`disjoint`].
fn draft_layout_ok(s: &DraftLogitsShape, len: usize, vocab: usize, num_slots: usize) -> bool {
    let last = (s.slots as u128).saturating_sub(1) * s.stride0 as u128
        + (s.k as u128).saturating_sub(1) * s.stride1 as u128
        + s.width as u128;
    s.width >= vocab && s.slots >= num_slots && s.k >= 1 && disjoint(s) && (s.slots == 0 || last <= len as u128)
}

/// Whether no two `(slot, column)` rows of draft logits share an element: every
/// row start, sorted, at least `width` past the one before (draft logits of no
/// slots is checked as one of one slot).
fn disjoint(s: &DraftLogitsShape) -> bool {
    let mut starts: Vec<u128> = (0..s.slots.max(1) as u128)
        .flat_map(|a| (0..s.k as u128).map(move |b| a * s.stride0 as u128 + b * s.stride1 as u128))
        .collect();
    starts.sort_unstable();
    starts.windows(2).all(|pair| pair[0] + s.width as u128 <= pair[1])
}

fn logits_ok(rows: usize, vocab: usize, row_stride: usize, len: usize) -> bool {
    (1..=MAX_VOCAB).contains(&vocab) && extent(rows, row_stride, vocab).is_some_and(|n| n <= len)
}

/// Whether `slot` may be used: padding, or in range with a valid temperature.
fn slot_ok(slot: i32, temperature: &[f32]) -> bool {
    slot == -1 || usize::try_from(slot).is_ok_and(|s| s < temperature.len() && temperature_is_valid(temperature[s]))
}

/// Whether every array of a filter table has `num_slots` entries.
fn filter_lengths_ok(t: &FilterTable, num_slots: usize) -> bool {
    t.top_k.as_ref().is_none_or(|k| k.len() == num_slots)
        && t.top_p.as_ref().is_none_or(|p| p.len() == num_slots)
        && t.min_p.as_ref().is_none_or(|m| m.len() == num_slots)
}

/// The typed error of one bad filter value: the parameter, slot, the value's
/// bits (NaN payloads compare) and whether it is in the draft logits' table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterError {
    pub param: &'static str,
    pub slot: usize,
    pub bits: u32,
    pub draft: bool,
}

impl FilterError {
    /// The filter error `e` reports, if it is one.
    fn of(e: &Error) -> Option<Self> {
        let (param, slot, bits, draft) = match *e {
            Error::InvalidTopK { slot, value, draft } => ("top_k", slot, value as u32, draft),
            Error::InvalidTopP { slot, value, draft } => ("top_p", slot, value.to_bits(), draft),
            Error::InvalidMinP { slot, value, draft } => ("min_p", slot, value.to_bits(), draft),
            _ => return None,
        };
        Some(FilterError { param, slot, bits, draft })
    }
}

/// The errors slot `slot`'s values in `t` may give (SPEC §7.1, written out
/// here): one per value out of its range (`top_k < 0`; `top_p` outside
/// `(0, 1]`, `min_p` outside `[0, 1]`, NaN outside both).
fn filter_errors(t: &FilterTable, slot: usize, draft: bool) -> Vec<FilterError> {
    let error = |param, bits| FilterError { param, slot, bits, draft };
    let mut errors = Vec::new();
    if let Some(k) = t.top_k.as_ref().filter(|k| k[slot] < 0) {
        errors.push(error("top_k", k[slot] as u32));
    }
    if let Some(p) = t.top_p.as_ref().filter(|p| !(p[slot] > 0.0 && p[slot] <= 1.0)) {
        errors.push(error("top_p", p[slot].to_bits()));
    }
    if let Some(m) = t.min_p.as_ref().filter(|m| !(m[slot] >= 0.0 && m[slot] <= 1.0)) {
        errors.push(error("min_p", m[slot].to_bits()));
    }
    errors
}

/// Panics unless a call whose only fault is a bad filter value failed with
/// one of the errors `want` lists.
fn assert_filter_error(got: Option<FilterError>, want: &[FilterError], e: &str, ctx: &str) {
    assert!(
        got.is_some_and(|g| want.contains(&g)),
        "a call invalid only by its filter values {want:?} failed with {e}: {ctx}"
    );
}

/// Panics unless a sampling row's `token` is in the kept set of `row` at
/// temperature `t` under `filter` (SPEC §7.2), where the row has a value
/// above `-inf` (else SPEC §3.4's token 0 needs no set).
fn assert_kept(row: &[f32], t: f32, filter: Filter, token: i64, what: &str) {
    if filter.is_off(row.len()) || row.iter().all(|&x| x.is_nan() || x == f32::NEG_INFINITY) {
        return;
    }
    let kept = reference_kept(row, t, filter);
    assert!(kept[token as usize], "{what}: token {token} is outside the kept set of {filter:?} at T {t}: {row:?}");
}

/// How a row's token was drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Draw {
    /// `T = 0` (or padding): the first argmax.
    Greedy,
    /// Gumbel-max over `logit/T`: a `+inf` logit beats every noisy finite
    /// score, so the first `+inf` wins (SPEC §3.2, ties to the smallest id).
    Sample,
    /// A bonus or resampled token of `rejection_sample`, whose residual may
    /// have removed a `+inf` id.
    Resample,
}

/// The tokens a row of `values` may give: its first argmax when greedy (SPEC
/// §3.1, NaN counting as `-inf`); else not NaN or `-inf` while the row has
/// another value (see [`Draw`] for `+inf`), and 0 if it has nothing above
/// `-inf` (SPEC §3.4).
fn assert_row_token(row: &[f32], token: i64, draw: Draw, what: &str) {
    assert!((0..row.len() as i64).contains(&token), "{what}: token {token} outside 0..{}", row.len());
    let t = token as usize;
    let first_inf = row.iter().position(|&x| x == f32::INFINITY);
    if draw == Draw::Greedy {
        assert_eq!(t, first_argmax(row), "{what}: a greedy row's token is its first argmax: {row:?}");
    } else if let (Draw::Sample, Some(inf)) = (draw, first_inf) {
        assert_eq!(t, inf, "{what}: the first +inf wins: {row:?}");
    } else if row.iter().any(|&x| !x.is_nan() && x != f32::NEG_INFINITY) {
        assert!(!row[t].is_nan() && row[t] != f32::NEG_INFINITY, "{what}: token {t} is {} in {row:?}", row[t]);
    } else {
        assert_eq!(t, 0, "{what}: a row without a finite logit gives token 0: {row:?}");
    }
}

fn nan_status(row: &[f32]) -> u32 {
    if row.iter().any(|x| x.is_nan()) { NAN_LOGITS } else { 0 }
}

/// The name of an error's variant (from its `Debug` form), for tallies.
fn variant(debug: &str) -> String {
    debug.split(['{', '(', ' ']).next().unwrap_or(debug).to_string()
}

/// What a checked call returned: `Ok`, or the name of its error variant.
pub type Outcome = Result<(), String>;

/// Panics unless the call succeeded exactly when the model says it is
/// `valid`; returns the error (its `Debug` form) when it failed.
fn judge<'r>(result: &'r Result<(), String>, valid: bool, ctx: &str) -> Option<&'r str> {
    match result {
        Ok(()) if !valid => panic!("an invalid call was accepted: {ctx}"),
        Err(e) if valid => panic!("a valid call was rejected: {e}: {ctx}"),
        Ok(()) => None,
        Err(e) => Some(e),
    }
}

/// Bitwise equality of two value buffers, NaN matching any NaN where
/// `loose_nan` (values converted between dtypes may carry other payloads).
fn assert_same_values(got: &Values, want: &Values, loose_nan: bool, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for i in 0..got.len() {
        let same = got.bits(i) == want.bits(i) || loose_nan && got.get(i).is_nan() && want.get(i).is_nan();
        assert!(
            same,
            "{what}: element {i} is {} ({:#x}), expected {} ({:#x})",
            got.get(i),
            got.bits(i),
            want.get(i),
            want.bits(i)
        );
    }
}

// --- gumbel_sample --------------------------------------------------------------

/// A `gumbel_sample` call, valid or not: the inputs, and the output lengths.
#[derive(Clone, Debug)]
pub struct GumbelCall {
    pub batch: Batch,
    pub tokens_len: usize,
    /// `None`: no row-status output.
    pub row_status_len: Option<usize>,
    pub logprobs: LogprobLens,
}

/// What one run of a [`GumbelCall`] left in its outputs.
#[derive(Debug)]
pub struct GumbelRun {
    /// The error in its `Debug` form.
    pub result: Result<(), String>,
    /// The error, if it is a bad filter value's.
    pub filter_error: Option<FilterError>,
    /// Widened to i64; `i64::MIN` where nothing was written.
    pub tokens: Vec<i64>,
    pub row_status: Option<Vec<u32>>,
    pub draft_logits: Option<Values>,
    pub logprobs: LogprobsRun,
}

impl GumbelRun {
    /// Whether the call wrote none of its tokens, row statuses and
    /// log-probabilities (each as it was filled; the draft logits, an input
    /// too, are the caller's to compare).
    fn untouched(&self) -> bool {
        self.tokens.iter().all(|&t| t == i64::MIN)
            && self.row_status.iter().flatten().all(|&s| s == u32::MAX)
            && self.logprobs.untouched()
    }
}

impl GumbelCall {
    pub fn generate(c: &mut impl Choices) -> Self {
        let dtype = c.pick(&DType::ALL);
        let vocab = vocab(c);
        let rows = c.upto(MAX_ROWS);
        let row_stride = row_stride(c, vocab);
        let len = buffer_len(c, extent(rows, row_stride, vocab));
        let logits = values(c, dtype, len);
        let (temperature, seed) = table(c);
        let num_slots = temperature.len();
        let filters = filter_table(c, num_slots);
        let slots = (0..c.len_near(rows)).map(|_| slot(c, num_slots)).collect();
        let positions_len = c.len_near(rows);
        let pos = positions(c, positions_len);
        let drafting = c.below(2) == 1;
        let draft_logits = (c.below(2) == 1).then(|| {
            let draft_dtype = c.pick(&DType::ALL);
            let k = if c.one_in(12) { 0 } else { 1 + c.upto(3) };
            let (shape, len) = draft_layout(c, num_slots, k, vocab);
            let column = match c.below(2) {
                0 => ColumnSpec::All(match c.weighted(&[16, 1]) {
                    0 => c.upto(k.saturating_sub(1)),
                    _ => c.pick(&[k, k + 1, usize::MAX]),
                }),
                _ => ColumnSpec::PerRow((0..c.len_near(rows)).map(|_| column(c, k)).collect()),
            };
            let DraftLogitsShape { slots, k, width, stride0, stride1 } = shape;
            DraftLogitsSpec { data: values(c, draft_dtype, len), slots, k, width, stride0, stride1, column }
        });
        let tokens_i64 = c.below(2) == 1;
        let tokens_len = c.len_near(rows);
        let row_status_len = if c.one_in(4) { None } else { Some(c.len_near(rows)) };
        let logprobs = LogprobLens::generate(c, rows);
        let batch = Batch {
            logits,
            rows,
            vocab,
            row_stride,
            slots,
            pos,
            temperature,
            seed,
            drafting,
            filters,
            draft_logits,
            tokens_i64,
        };
        GumbelCall { batch, tokens_len, row_status_len, logprobs }
    }

    /// Whether SPEC §3, §5 and §7.1 make this call valid (worked out here, not by the crate).
    pub fn valid(&self) -> bool {
        self.valid_but_filters() && self.filter_errors().is_empty()
    }

    /// Whether the call is valid but for the filter values of its used slots.
    fn valid_but_filters(&self) -> bool {
        let b = &self.batch;
        let rows = b.rows;
        let num_slots = b.temperature.len();
        let shapes = logits_ok(rows, b.vocab, b.row_stride, b.logits.len())
            && b.seed.len() == num_slots
            && filter_lengths_ok(&b.filters, num_slots)
            && b.slots.len() == rows
            && b.pos.len() == rows
            && self.tokens_len == rows
            && self.row_status_len.is_none_or(|n| n == rows)
            && self.logprobs.valid(rows)
            && b.draft_logits.as_ref().is_none_or(|c| {
                draft_layout_ok(&c.shape(), c.data.len(), b.vocab, num_slots)
                    && match &c.column {
                        ColumnSpec::All(col) => *col < c.k,
                        ColumnSpec::PerRow(cols) => cols.len() == rows,
                    }
            });
        shapes
            && (0..rows).all(|r| {
                let used = b.slots[r] != -1;
                let column_ok = match &b.draft_logits {
                    Some(DraftLogitsSpec { column: ColumnSpec::PerRow(cols), k, .. }) => {
                        usize::try_from(cols[r]).is_ok_and(|col| col < *k)
                    }
                    _ => true,
                };
                slot_ok(b.slots[r], &b.temperature) && (!used || column_ok)
            })
    }

    /// The errors the bad filter values of used slots may give, given
    /// [`Self::valid_but_filters`].
    fn filter_errors(&self) -> Vec<FilterError> {
        let b = &self.batch;
        let used = b.slots.iter().filter_map(|&s| usize::try_from(s).ok());
        used.flat_map(|s| filter_errors(&b.filters, s, false)).collect()
    }

    /// Runs the call on `backend` with every buffer guarded; panics if it
    /// panics, writes outside a region or changes an input.
    pub fn run(&self, backend: &Backend, tokens_i64: bool) -> GumbelRun {
        self.run_with(tokens_i64, |call, out| backend.gumbel_sample(call, out))
    }

    /// [`GumbelCall::run`] as the one rank of a vocab-parallel group
    /// (`Cpu::sharded_gumbel_sample`, the whole row its shard).
    pub fn run_sharded(&self, tokens_i64: bool) -> GumbelRun {
        let (shard, mut exchange) = lone_rank(self.batch.vocab);
        self.run_with(tokens_i64, |call, out| specdec::Cpu.sharded_gumbel_sample(shard, &mut exchange, call, out))
    }

    /// [`GumbelCall::run`] through `call_fn`.
    fn run_with(
        &self,
        tokens_i64: bool,
        call_fn: impl FnOnce(&GumbelSample<'_, Host>, &mut GumbelOutput<'_, Host>) -> specdec::Result<()>,
    ) -> GumbelRun {
        let b = &self.batch;
        let logits = GuardedValues::new(&b.logits);
        let slots = Guarded::new(&b.slots);
        let pos = Guarded::new(&b.pos);
        let temperature = Guarded::new(&b.temperature);
        let seed = Guarded::new(&b.seed);
        let filters = GuardedFilters::new(&b.filters);
        let mut draft_logits = b.draft_logits.as_ref().map(|c| GuardedValues::new(&c.data));
        let columns = match b.draft_logits.as_ref().map(|c| &c.column) {
            Some(ColumnSpec::PerRow(cols)) => Some(Guarded::new(cols)),
            _ => None,
        };
        let mut tokens = GuardedTokens::new(self.tokens_len, tokens_i64);
        let mut row_status = guarded_out(self.row_status_len, u32::MAX);
        let mut logprobs = GuardedLogprobs::new(&self.logprobs);
        let result = {
            let call = GumbelSample {
                logits: Logits { data: logits.view(), rows: b.rows, vocab: b.vocab, row_stride: b.row_stride },
                slots: slots.region(),
                pos: pos.region(),
                params: SamplingParams::new(temperature.region(), seed.region()).with_filters(filters.view()),
                drafting: b.drafting,
            };
            let mut out = tokens.gumbel_output();
            if let Some(s) = &mut row_status {
                out = out.with_row_status(s.region_mut());
            }
            out = out.with_logprobs(logprobs.view());
            if let (Some(data), Some(c)) = (draft_logits.as_mut(), &b.draft_logits) {
                let column = match (&c.column, &columns) {
                    (ColumnSpec::PerRow(_), Some(cols)) => Column::per_row(cols.region()),
                    (ColumnSpec::All(col), _) => Column::All(*col),
                    (ColumnSpec::PerRow(_), None) => unreachable!("per-row columns are guarded above"),
                };
                out = out.with_draft_logits(DraftLogitsMut { data: data.view_mut(), shape: c.shape() }, column);
            }
            no_panic("gumbel_sample", self, || call_fn(&call, &mut out))
        };
        logits.assert_intact("logits");
        assert_same_values(&logits.values(), &b.logits, false, "logits (an input)");
        slots.assert_holds(&b.slots, "slots");
        pos.assert_holds(&b.pos, "positions");
        temperature.assert_holds(&b.temperature, "temperatures");
        seed.assert_holds(&b.seed, "seeds");
        filters.assert_holds(&b.filters, "filters");
        if let (Some(g), Some(ColumnSpec::PerRow(cols))) = (&columns, b.draft_logits.as_ref().map(|c| &c.column)) {
            g.assert_holds(cols, "draft-logits columns");
        }
        if let Some(c) = &draft_logits {
            c.assert_intact("draft logits");
        }
        GumbelRun {
            filter_error: result.as_ref().err().and_then(FilterError::of),
            result: result.map_err(|e| format!("{e:?}")),
            tokens: tokens.tokens("tokens"),
            row_status: read_out(&row_status, "row status"),
            draft_logits: draft_logits.map(|c| c.values()),
            logprobs: logprobs.read(),
        }
    }

    /// The draft logits after a valid call: each used row's logits `0..V`, converted,
    /// at its slot and column, rows in order (SPEC §3.3).
    fn expected_draft_logits(&self) -> Option<Values> {
        let b = &self.batch;
        let c = b.draft_logits.as_ref()?;
        let mut want = c.data.clone();
        for r in (0..b.rows).filter(|&r| b.slots[r] >= 0) {
            let col = match &c.column {
                ColumnSpec::All(col) => *col,
                ColumnSpec::PerRow(cols) => cols[r] as usize,
            };
            let at = b.slots[r] as usize * c.stride0 + col * c.stride1;
            for x in 0..b.vocab {
                want.store_converted(at + x, &b.logits, r * b.row_stride + x);
            }
        }
        Some(want)
    }

    /// The property: see the module docs. Returns the outcome, for tallies.
    pub fn check(&self) -> Outcome {
        let b = &self.batch;
        let first = self.run(&Backend::cpu(), b.tokens_i64);
        let ctx = format!("{self:#?}");
        if let Some(e) = judge(&first.result, self.valid(), &ctx) {
            if self.valid_but_filters() {
                assert_filter_error(first.filter_error, &self.filter_errors(), e, &ctx);
            }
            assert!(first.untouched(), "a failed call ({e}) wrote its outputs: {first:?}: {ctx}");
            if let (Some(got), Some(c)) = (&first.draft_logits, &b.draft_logits) {
                assert_same_values(got, &c.data, false, &format!("a failed call ({e}) wrote the draft logits"));
            }
            return Err(variant(e));
        }
        for r in 0..b.rows {
            let slot = b.slots[r];
            let greedy = slot == -1 || b.temperature[slot as usize] == 0.0;
            // A random row writing draft logits that round its logits samples the
            // values as stored (SPEC §3.3).
            let rounds = b.draft_logits.as_ref().is_some_and(|c| b.logits.dtype().rounds_into(c.data.dtype()));
            let row = match (&b.draft_logits, rounds && !greedy) {
                (Some(c), true) => Values::from_f32(c.data.dtype(), &b.row(r)).f32s(0..b.vocab),
                _ => b.row(r),
            };
            let draw = if greedy { Draw::Greedy } else { Draw::Sample };
            let what = format!("row {r} (slot {slot}): {ctx}");
            assert_row_token(&row, first.tokens[r], draw, &what);
            if !greedy {
                let (t, filter) = (b.temperature[slot as usize], b.filters.slot(slot as usize));
                assert_kept(&row, t, filter, first.tokens[r], &what);
            }
            if let Some(s) = &first.row_status {
                assert_eq!(s[r], nan_status(&row), "row {r}: status: {ctx}");
            }
            first.logprobs.assert_position(r, true, b.vocab, &what);
        }
        if let (Some(got), Some(want)) = (&first.draft_logits, self.expected_draft_logits()) {
            let loose = b.draft_logits.as_ref().is_some_and(|c| c.data.dtype() != b.logits.dtype());
            assert_same_values(got, &want, loose, &format!("draft logits: {ctx}"));
        }
        // Deterministic, and independent of the token width.
        let again = self.run(&Backend::cpu(), b.tokens_i64);
        assert!(again.result.is_ok(), "the second run failed: {:?}: {ctx}", again.result);
        assert_eq!(again.tokens, first.tokens, "second run: tokens: {ctx}");
        assert_eq!(again.row_status, first.row_status, "second run: row status: {ctx}");
        assert_eq!(again.logprobs, first.logprobs, "second run: log-probabilities: {ctx}");
        if let (Some(x), Some(y)) = (&again.draft_logits, &first.draft_logits) {
            assert_same_values(x, y, false, &format!("second run: draft logits: {ctx}"));
        }
        let other = self.run(&Backend::cpu(), !b.tokens_i64);
        assert_eq!(other.tokens, first.tokens, "the other token width: {ctx}");
        Ok(())
    }
}

impl GumbelCall {
    /// The sharded call of one rank holding every id (REFERENCE §9) gives the
    /// unsharded call's outputs and errors, but for a valid call whose random
    /// rows filter by top-p or min-p without a top-k: `NotSharded`, nothing
    /// written. Returns the outcome.
    pub fn check_sharded(&self) -> Outcome {
        let b = &self.batch;
        let (want, got) = (self.run(&Backend::cpu(), b.tokens_i64), self.run_sharded(b.tokens_i64));
        let ctx = format!("{self:#?}");
        let refused = self.valid()
            && b.slots
                .iter()
                .any(|&s| s >= 0 && b.temperature[s as usize] != 0.0 && unbounded(b.filters.slot(s as usize), b.vocab));
        if refused {
            assert!(got.result.as_ref().is_err_and(|e| e.starts_with("NotSharded")), "{:?}: {ctx}", got.result);
            assert!(got.untouched(), "a refused sharded call wrote its outputs: {got:?}: {ctx}");
            if let (Some(g), Some(c)) = (&got.draft_logits, &b.draft_logits) {
                assert_same_values(g, &c.data, false, &format!("a refused sharded call wrote the draft logits: {ctx}"));
            }
            return Err("NotSharded".into());
        }
        let what = |part: &str| format!("sharded (one rank) against unsharded: {part}: {ctx}");
        assert_eq!(got.result, want.result, "{}", what("result"));
        assert_eq!(got.tokens, want.tokens, "{}", what("tokens"));
        assert_eq!(got.row_status, want.row_status, "{}", what("row status"));
        assert_eq!(got.logprobs, want.logprobs, "{}", what("log-probabilities"));
        if let (Some(g), Some(w)) = (&got.draft_logits, &want.draft_logits) {
            assert_same_values(g, w, false, &what("draft logits"));
        }
        want.result.map_err(|e| variant(&e))
    }
}

/// A per-row draft-logits column: mostly in `0..k`, sometimes out of range.
fn column(c: &mut impl Choices, k: usize) -> i32 {
    match c.weighted(&[20, 1]) {
        0 if k > 0 => c.below(k as u64) as i32,
        _ => c.pick(&[-1, k as i32, k as i32 + 1, i32::MIN, i32::MAX]),
    }
}

// --- rejection_sample -----------------------------------------------------------

/// A `rejection_sample` call, valid or not: the inputs, and the output lengths.
#[derive(Clone, Debug)]
pub struct RejectionCall {
    pub verify: Verify,
    pub tokens_len: usize,
    pub num_emitted_len: usize,
    /// `None`: no such output.
    pub accepted_len: Option<usize>,
    pub row_status_len: Option<usize>,
    pub logprobs: LogprobLens,
}

/// The log-probability outputs a call asks for (REFERENCE §8): each
/// buffer's length, `None` where the call has no such output.
#[derive(Clone, Debug, Default)]
pub struct LogprobLens {
    pub processed: Option<usize>,
    pub raw: Option<usize>,
    pub top: Option<TopLens>,
}

/// A top-n output: `n` and its three buffers' lengths.
#[derive(Clone, Debug)]
pub struct TopLens {
    pub n: usize,
    pub raw: bool,
    pub logprobs: usize,
    pub ids: usize,
    pub ranks: usize,
}

impl LogprobLens {
    /// Outputs for `positions` positions, often none, their lengths and `n` sometimes wrong.
    fn generate(c: &mut impl Choices, positions: usize) -> Self {
        if c.below(2) == 0 {
            return LogprobLens::default();
        }
        let processed = (c.below(2) == 1).then(|| c.len_near(positions));
        let raw = (c.below(2) == 1).then(|| c.len_near(positions));
        let top = (c.below(2) == 1).then(|| {
            let n = if c.one_in(8) { MAX_TOP_LOGPROBS + 1 } else { c.upto(MAX_TOP_LOGPROBS.min(8)) };
            let (logprobs, ids) = (c.len_near(positions * n), c.len_near(positions * n));
            TopLens { n, raw: c.below(2) == 1, logprobs, ids, ranks: c.len_near(positions) }
        });
        LogprobLens { processed, raw, top }
    }

    /// Whether these outputs fit `positions` positions (`Logprobs::check`'s rules).
    fn valid(&self, positions: usize) -> bool {
        self.processed.is_none_or(|n| n == positions)
            && self.raw.is_none_or(|n| n == positions)
            && self.top.as_ref().is_none_or(|t| {
                t.n <= MAX_TOP_LOGPROBS
                    && t.logprobs == positions * t.n
                    && t.ids == positions * t.n
                    && t.ranks == positions
            })
    }
}

/// A call's log-probability outputs, guarded, filled with `NaN` and `i32::MIN`.
struct GuardedLogprobs {
    processed: Option<Guarded<f32>>,
    raw: Option<Guarded<f32>>,
    top: Option<GuardedTop>,
}

/// A top-n output, guarded.
struct GuardedTop {
    n: usize,
    distribution: Distribution,
    logprobs: Guarded<f32>,
    ids: Guarded<i32>,
    ranks: Guarded<i32>,
}

impl GuardedLogprobs {
    fn new(lens: &LogprobLens) -> Self {
        GuardedLogprobs {
            processed: guarded_out(lens.processed, f32::NAN),
            raw: guarded_out(lens.raw, f32::NAN),
            top: lens.top.as_ref().map(|t| GuardedTop {
                n: t.n,
                distribution: if t.raw { Distribution::Raw } else { Distribution::Processed },
                logprobs: Guarded::filled(t.logprobs, f32::NAN),
                ids: Guarded::filled(t.ids, i32::MIN),
                ranks: Guarded::filled(t.ranks, i32::MIN),
            }),
        }
    }

    fn view(&mut self) -> Logprobs<'_, Host> {
        let mut out = Logprobs::none();
        if let Some(p) = &mut self.processed {
            out = out.with_processed(p.region_mut());
        }
        if let Some(r) = &mut self.raw {
            out = out.with_raw(r.region_mut());
        }
        if let Some(t) = &mut self.top {
            out = out.with_top(t.n, t.distribution, t.logprobs.region_mut(), t.ids.region_mut(), t.ranks.region_mut());
        }
        out
    }

    /// What the call left, canaries checked; log-probabilities as bits (NaN compares).
    fn read(&self) -> LogprobsRun {
        let bits = |g: &Option<Guarded<f32>>, what| read_out(g, what).map(|v| v.iter().map(|x| x.to_bits()).collect());
        LogprobsRun {
            processed: bits(&self.processed, "processed logprobs"),
            raw: bits(&self.raw, "raw logprobs"),
            top: self.top.as_ref().map(|t| {
                t.logprobs.assert_intact("top logprobs");
                t.ids.assert_intact("top ids");
                t.ranks.assert_intact("ranks");
                TopRun {
                    n: t.n,
                    logprobs: t.logprobs.region().iter().map(|x| x.to_bits()).collect(),
                    ids: t.ids.region().to_vec(),
                    ranks: t.ranks.region().to_vec(),
                }
            }),
        }
    }
}

/// The log-probability outputs of a run, `f32` as bits (so NaN compares).
#[derive(Clone, Debug, PartialEq)]
pub struct LogprobsRun {
    pub processed: Option<Vec<u32>>,
    pub raw: Option<Vec<u32>>,
    pub top: Option<TopRun>,
}

/// A top-n output of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct TopRun {
    pub n: usize,
    pub logprobs: Vec<u32>,
    pub ids: Vec<i32>,
    pub ranks: Vec<i32>,
}

impl LogprobsRun {
    /// Whether nothing was written (every buffer as it was filled).
    fn untouched(&self) -> bool {
        let nan = |v: &Option<Vec<u32>>| v.iter().flatten().all(|&b| b == f32::NAN.to_bits());
        nan(&self.processed)
            && nan(&self.raw)
            && self.top.iter().all(|t| {
                t.logprobs.iter().all(|&b| b == f32::NAN.to_bits())
                    && t.ids.iter().chain(&t.ranks).all(|&x| x == i32::MIN)
            })
    }

    /// Panics unless position `at` holds an emitted token's outputs (`emitted`;
    /// log-probabilities never above 0, ids of the row or `-1`, a rank from 1)
    /// or a position past the emitted ones' (NaN, ids and rank `-1`).
    fn assert_position(&self, at: usize, emitted: bool, vocab: usize, what: &str) {
        for (name, values) in [("processed", &self.processed), ("raw", &self.raw)] {
            if let Some(v) = values {
                let x = f32::from_bits(v[at]);
                if emitted {
                    assert!(x.is_nan() || x <= 0.0, "{what}: {name} log-probability {x} above 0");
                } else {
                    assert!(x.is_nan(), "{what}: {name} log-probability {x} past the emitted tokens");
                }
            }
        }
        if let Some(TopRun { n, logprobs, ids, ranks }) = &self.top {
            let (listed, ids) = (&logprobs[at * n..(at + 1) * n], &ids[at * n..(at + 1) * n]);
            if emitted {
                assert!(ranks[at] >= 1, "{what}: rank {}", ranks[at]);
                assert!(ids.iter().all(|&id| (-1..vocab as i64).contains(&(id as i64))), "{what}: top ids {ids:?}");
                let at_most_0 = |&b: &u32| f32::from_bits(b).is_nan() || f32::from_bits(b) <= 0.0;
                assert!(listed.iter().all(at_most_0), "{what}: a top log-probability above 0");
            } else {
                assert_eq!(ranks[at], -1, "{what}: rank past the emitted tokens");
                assert!(ids.iter().all(|&id| id == -1), "{what}: top ids past the emitted tokens: {ids:?}");
                assert!(
                    listed.iter().all(|&b| f32::from_bits(b).is_nan()),
                    "{what}: top log-probabilities past the emitted tokens"
                );
            }
        }
    }
}

/// What one run of a [`RejectionCall`] left in its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct RejectionRun {
    /// The error in its `Debug` form.
    pub result: Result<(), String>,
    /// The error, if it is a bad filter value's.
    pub filter_error: Option<FilterError>,
    /// Widened to i64; `i64::MIN` where nothing was written.
    pub tokens: Vec<i64>,
    pub num_emitted: Vec<i32>,
    pub accepted: Option<Vec<i32>>,
    pub row_status: Option<Vec<u32>>,
    pub logprobs: LogprobsRun,
}

impl RejectionRun {
    /// Whether the call wrote none of its outputs (each as it was filled).
    fn untouched(&self) -> bool {
        self.tokens.iter().all(|&t| t == i64::MIN)
            && self.num_emitted.iter().chain(self.accepted.iter().flatten()).all(|&n| n == i32::MIN)
            && self.row_status.iter().flatten().all(|&s| s == u32::MAX)
            && self.logprobs.untouched()
    }
}

/// A draft id: the row's argmax (so greedy requests accept), any id,
/// a placeholder, or an invalid id.
#[derive(Clone, Copy, Debug)]
enum DraftChoice {
    Argmax,
    Id(i32),
}

impl RejectionCall {
    pub fn generate(c: &mut impl Choices) -> Self {
        let dtype = c.pick(&DType::ALL);
        let vocab = vocab(c);
        let requests = c.upto(MAX_ROWS / 2);
        let drafts: Vec<usize> = (0..requests).map(|_| if c.one_in(4) { 0 } else { c.upto(4) }).collect();
        let most = drafts.iter().copied().max().unwrap_or(0);
        let max_drafts = match c.weighted(&[14, 3, 1, 1]) {
            0 => most,
            1 => most + 1 + c.upto(1),
            2 => most.saturating_sub(1),
            _ => MAX_DRAFTS + 1,
        };
        let mut offsets = vec![0i32];
        for &n in &drafts {
            offsets.push(offsets.last().unwrap() + n as i32 + 1);
        }
        let rows = *offsets.last().unwrap() as usize;
        corrupt_offsets(c, &mut offsets, max_drafts);
        let row_stride = row_stride(c, vocab);
        let len = buffer_len(c, extent(rows, row_stride, vocab));
        let target = values(c, dtype, len);
        let (temperature, seed) = table(c);
        let num_slots = temperature.len();
        let filters = filter_table(c, num_slots);
        let draft_ids: Vec<DraftChoice> = (0..c.len_near(rows))
            .map(|_| match c.weighted(&[8, 8, 2, 1]) {
                0 => DraftChoice::Argmax,
                1 => DraftChoice::Id(c.below(vocab.max(1) as u64) as i32),
                2 => DraftChoice::Id(-1),
                _ => DraftChoice::Id(c.pick(&[-2, vocab as i32, vocab as i32 + 1, i32::MIN, i32::MAX])),
            })
            .collect();
        let slots = (0..c.len_near(requests)).map(|_| slot(c, num_slots)).collect();
        let positions_len = c.len_near(rows);
        let pos = positions(c, positions_len);
        let draft = (c.below(2) == 1).then(|| {
            let k = match c.weighted(&[12, 2, 1]) {
                0 => max_drafts.max(1),
                1 => max_drafts + 1 + c.upto(1),
                _ => max_drafts.saturating_sub(1),
            };
            let (shape, len) = draft_layout(c, num_slots, k, vocab);
            let dtype = c.pick(&DType::ALL);
            (values(c, dtype, len), shape)
        });
        // The drafts' filters travel with the draft logits (none in one-hot mode).
        let draft_filters = if draft.is_some() { filter_table(c, num_slots) } else { FilterTable::none() };
        let tokens_i64 = c.below(2) == 1;
        let tokens_len = c.len_near(requests * (max_drafts + 1));
        let num_emitted_len = c.len_near(requests);
        let accepted_len = if c.one_in(4) { None } else { Some(c.len_near(requests)) };
        let row_status_len = if c.one_in(4) { None } else { Some(c.len_near(rows)) };
        let logprobs = LogprobLens::generate(c, requests * (max_drafts + 1));
        let mut verify = Verify {
            target,
            rows,
            vocab,
            row_stride,
            offsets,
            drafts: Vec::new(),
            slots,
            pos,
            temperature,
            seed,
            max_drafts,
            verification: Verification::Token,
            draft,
            filters,
            draft_filters,
            tokens_i64,
        };
        let readable = logits_ok(rows, vocab, row_stride, verify.target.len());
        verify.drafts = draft_ids
            .iter()
            .enumerate()
            .map(|(row, d)| match d {
                DraftChoice::Argmax if readable && row < rows => first_argmax(&target_row(&verify, row)) as i32,
                DraftChoice::Argmax => 0,
                DraftChoice::Id(id) => *id,
            })
            .collect();
        RejectionCall { verify, tokens_len, num_emitted_len, accepted_len, row_status_len, logprobs }
    }

    /// Whether SPEC §4, §5 and §7.1 make this call valid (worked out here, not by the crate).
    pub fn valid(&self) -> bool {
        self.valid_but_filters() && self.filter_errors().is_empty()
    }

    /// Whether the call is valid but for the filter values of its used slots.
    fn valid_but_filters(&self) -> bool {
        let v = &self.verify;
        let (rows, requests, num_slots) = (v.rows, v.slots.len(), v.temperature.len());
        let k1 = v.max_drafts + 1;
        let shapes = logits_ok(rows, v.vocab, v.row_stride, v.target.len())
            && v.seed.len() == num_slots
            && filter_lengths_ok(&v.filters, num_slots)
            && (v.draft.is_none() || filter_lengths_ok(&v.draft_filters, num_slots))
            && v.max_drafts <= MAX_DRAFTS
            && v.offsets.len() == requests + 1
            && v.drafts.len() == rows
            && v.pos.len() == rows
            && self.tokens_len == requests * k1
            && self.num_emitted_len == requests
            && self.accepted_len.is_none_or(|n| n == requests)
            && self.row_status_len.is_none_or(|n| n == rows)
            && self.logprobs.valid(requests * k1)
            && v.draft
                .as_ref()
                .is_none_or(|(d, s)| draft_layout_ok(s, d.len(), v.vocab, num_slots) && s.k >= v.max_drafts);
        shapes
            && v.offsets[0] == 0
            && v.offsets[requests] as i64 == rows as i64
            && (0..requests).all(|r| {
                let (o0, o1) = (v.offsets[r] as i64, v.offsets[r + 1] as i64);
                o1 > o0
                    && o1 <= rows as i64
                    && o1 - o0 - 1 <= v.max_drafts as i64
                    && slot_ok(v.slots[r], &v.temperature)
                    && (o0..o1 - 1).all(|row| (-1..v.vocab as i64).contains(&(v.drafts[row as usize] as i64)))
            })
    }

    /// The errors the bad filter values of used slots may give (the drafts'
    /// table only with draft logits), given [`Self::valid_but_filters`].
    fn filter_errors(&self) -> Vec<FilterError> {
        let v = &self.verify;
        let used = v.slots.iter().filter_map(|&s| usize::try_from(s).ok());
        used.flat_map(|s| {
            let mut errors = filter_errors(&v.filters, s, false);
            if v.draft.is_some() {
                errors.extend(filter_errors(&v.draft_filters, s, true));
            }
            errors
        })
        .collect()
    }

    /// Runs the call on `backend` with every buffer guarded; panics if it
    /// panics, writes outside a region or changes an input.
    pub fn run(&self, backend: &Backend, tokens_i64: bool) -> RejectionRun {
        self.run_with(tokens_i64, |call, out| backend.rejection_sample(call, out))
    }

    /// [`RejectionCall::run`] as the one rank of a vocab-parallel group
    /// (`Cpu::sharded_rejection_sample`, the whole row its shard).
    pub fn run_sharded(&self, tokens_i64: bool) -> RejectionRun {
        let (shard, mut exchange) = lone_rank(self.verify.vocab);
        self.run_with(tokens_i64, |call, out| specdec::Cpu.sharded_rejection_sample(shard, &mut exchange, call, out))
    }

    /// [`RejectionCall::run`] through `call_fn`.
    fn run_with(
        &self,
        tokens_i64: bool,
        call_fn: impl FnOnce(&RejectionSample<'_, Host>, &mut RejectionOutput<'_, Host>) -> specdec::Result<()>,
    ) -> RejectionRun {
        let v = &self.verify;
        let target = GuardedValues::new(&v.target);
        let draft = v.draft.as_ref().map(|(d, _)| GuardedValues::new(d));
        let offsets = Guarded::new(&v.offsets);
        let drafts = Guarded::new(&v.drafts);
        let slots = Guarded::new(&v.slots);
        let pos = Guarded::new(&v.pos);
        let temperature = Guarded::new(&v.temperature);
        let seed = Guarded::new(&v.seed);
        let (filters, draft_filters) = (GuardedFilters::new(&v.filters), GuardedFilters::new(&v.draft_filters));
        let mut tokens = GuardedTokens::new(self.tokens_len, tokens_i64);
        let mut num_emitted = Guarded::filled(self.num_emitted_len, i32::MIN);
        let mut accepted = guarded_out(self.accepted_len, i32::MIN);
        let mut row_status = guarded_out(self.row_status_len, u32::MAX);
        let call = RejectionSample {
            target: Logits { data: target.view(), rows: v.rows, vocab: v.vocab, row_stride: v.row_stride },
            offsets: offsets.region(),
            drafts: drafts.region(),
            slots: slots.region(),
            pos: pos.region(),
            params: SamplingParams::new(temperature.region(), seed.region()).with_filters(filters.view()),
            max_drafts: v.max_drafts,
            verification: Verification::Token,
            draft_logits: match (&draft, &v.draft) {
                (Some(d), Some((_, shape))) => {
                    Some(DraftLogits { data: d.view(), shape: *shape, filters: draft_filters.view() })
                }
                _ => None,
            },
        };
        let mut out = tokens.rejection_output(num_emitted.region_mut());
        if let Some(a) = &mut accepted {
            out = out.with_accepted(a.region_mut());
        }
        if let Some(s) = &mut row_status {
            out = out.with_row_status(s.region_mut());
        }
        let mut logprobs = GuardedLogprobs::new(&self.logprobs);
        out = out.with_logprobs(logprobs.view());
        let result = no_panic("rejection_sample", self, || call_fn(&call, &mut out));
        target.assert_intact("target logits");
        assert_same_values(&target.values(), &v.target, false, "target logits (an input)");
        if let (Some(g), Some((d, _))) = (&draft, &v.draft) {
            g.assert_intact("draft logits");
            assert_same_values(&g.values(), d, false, "draft logits (an input)");
        }
        offsets.assert_holds(&v.offsets, "offsets");
        drafts.assert_holds(&v.drafts, "drafts");
        slots.assert_holds(&v.slots, "slots");
        pos.assert_holds(&v.pos, "positions");
        temperature.assert_holds(&v.temperature, "temperatures");
        seed.assert_holds(&v.seed, "seeds");
        filters.assert_holds(&v.filters, "filters");
        draft_filters.assert_holds(&v.draft_filters, "draft logits' filters");
        num_emitted.assert_intact("num_emitted");
        RejectionRun {
            filter_error: result.as_ref().err().and_then(FilterError::of),
            result: result.map_err(|e| format!("{e:?}")),
            tokens: tokens.tokens("tokens"),
            num_emitted: num_emitted.region().to_vec(),
            accepted: read_out(&accepted, "accepted"),
            row_status: read_out(&row_status, "row status"),
            logprobs: logprobs.read(),
        }
    }

    /// The property: see the module docs. Returns the outcome, for tallies.
    pub fn check(&self) -> Outcome {
        let v = &self.verify;
        let first = self.run(&Backend::cpu(), v.tokens_i64);
        let ctx = format!("{self:#?}");
        if let Some(e) = judge(&first.result, self.valid(), &ctx) {
            if self.valid_but_filters() {
                assert_filter_error(first.filter_error, &self.filter_errors(), e, &ctx);
            }
            assert!(first.untouched(), "a failed call ({e}) wrote its outputs: {first:?}: {ctx}");
            return Err(variant(e));
        }
        let k1 = v.max_drafts + 1;
        for r in 0..v.slots.len() {
            let what = format!("request {r}: {ctx}");
            let (o0, o1) = (v.offsets[r] as usize, v.offsets[r + 1] as usize);
            let n = o1 - o0 - 1;
            let emitted = first.num_emitted[r];
            assert!((1..=n as i32 + 1).contains(&emitted), "{what}: num_emitted {emitted} outside 1..={}", n + 1);
            let j = emitted as usize - 1; // accepted drafts
            if let Some(a) = &first.accepted {
                assert_eq!(a[r], j as i32, "{what}: accepted");
            }
            let tokens = &first.tokens[r * k1..(r + 1) * k1];
            assert!(tokens[j + 1..].iter().all(|&t| t == -1), "{what}: tokens past the emitted ones: {tokens:?}");
            for i in 0..k1 {
                first.logprobs.assert_position(r * k1 + i, i <= j, v.vocab, &format!("{what}: position {i}"));
            }
            let slot = v.slots[r];
            let greedy = slot == -1 || v.temperature[slot as usize] == 0.0;
            for (i, &token) in tokens[..j].iter().enumerate() {
                let (d, row) = (v.drafts[o0 + i], target_row(v, o0 + i));
                assert_eq!(token, d as i64, "{what}: accepted token {i} is not the draft");
                assert!(d >= 0, "{what}: placeholder {i} was accepted");
                if greedy {
                    assert_eq!(d as usize, first_argmax(&row), "{what}: a greedy request accepted a non-argmax");
                } else {
                    let x = row[d as usize];
                    assert!(!x.is_nan() && x != f32::NEG_INFINITY, "{what}: draft {i} ({d}) with p = 0 was accepted");
                    let (t, filter) = (v.temperature[slot as usize], v.filters.slot(slot as usize));
                    assert_kept(&row, t, filter, token, &format!("{what}: accepted draft {i}"));
                }
            }
            // The greedy chain stops at the first placeholder or mismatch (SPEC §4).
            if greedy && j < n {
                let d = v.drafts[o0 + j];
                assert!(d == -1 || d as usize != first_argmax(&target_row(v, o0 + j)), "{what}: greedy stop at {j}");
            }
            let last = target_row(v, o0 + j);
            let draw = if greedy { Draw::Greedy } else { Draw::Resample };
            assert_row_token(&last, tokens[j], draw, &format!("{what}: emitted token {j}"));
            if !greedy {
                let (t, filter) = (v.temperature[slot as usize], v.filters.slot(slot as usize));
                assert_kept(&last, t, filter, tokens[j], &format!("{what}: emitted token {j}"));
            }
        }
        if let Some(s) = &first.row_status {
            for (row, &status) in s.iter().enumerate() {
                assert_eq!(status, nan_status(&target_row(v, row)), "row {row}: status: {ctx}");
            }
        }
        let again = self.run(&Backend::cpu(), v.tokens_i64);
        assert_eq!(again, first, "second run: {ctx}");
        let other = self.run(&Backend::cpu(), !v.tokens_i64);
        assert_eq!(other.tokens, first.tokens, "the other token width: {ctx}");
        Ok(())
    }
}

impl RejectionCall {
    /// The sharded call of one rank holding every id (REFERENCE §9) gives the
    /// unsharded call's outputs and errors, but for a valid call whose slots
    /// filter their rows: `NotSharded`, nothing written. Returns the outcome.
    pub fn check_sharded(&self) -> Outcome {
        let v = &self.verify;
        let (want, got) = (self.run(&Backend::cpu(), v.tokens_i64), self.run_sharded(v.tokens_i64));
        let ctx = format!("{self:#?}");
        // Top-p or min-p without a top-k (kept sets of no bounded size) on a
        // random request is refused; greedy requests ignore filters.
        let refused = self.valid()
            && v.slots.iter().any(|&s| {
                let unbounded = |t: &FilterTable| unbounded(t.slot(s as usize), v.vocab);
                s >= 0
                    && v.temperature[s as usize] != 0.0
                    && (unbounded(&v.filters) || (v.draft.is_some() && unbounded(&v.draft_filters)))
            });
        if refused {
            assert!(got.result.as_ref().is_err_and(|e| e.starts_with("NotSharded")), "{:?}: {ctx}", got.result);
            assert!(got.untouched(), "a refused sharded call wrote its outputs: {got:?}: {ctx}");
            return Err("NotSharded".into());
        }
        assert_eq!(got, want, "sharded (one rank) against unsharded: {ctx}");
        want.result.map_err(|e| variant(&e))
    }
}

/// One rank holding every id of rows of `vocab` ids, and its exchange (a group of one).
fn lone_rank(vocab: usize) -> (Shard, InProcess) {
    (Shard { offset: 0, vocab }, InProcess::group(1).pop().expect("a group of one"))
}

/// Whether the sharded calls refuse filter `f` on a random row of `vocab`
/// ids: on, without a top-k (top-p or min-p alone keep sets of no bounded
/// size, REFERENCE §9).
fn unbounded(f: Filter, vocab: usize) -> bool {
    !f.is_off(vocab) && !f.has_top_k(vocab)
}

/// Target row `row`, ids `0..V`, widened to f32.
fn target_row(v: &Verify, row: usize) -> Vec<f32> {
    v.target.f32s(row * v.row_stride..row * v.row_stride + v.vocab)
}

/// Breaks the row offsets about one time in seven: a first offset other than
/// 0, a last one other than the row count, out of order, a request with no
/// rows, negative or huge entries, an entry past the rows (by no more than K
/// drafts when it can), or a length off by one.
fn corrupt_offsets(c: &mut impl Choices, offsets: &mut Vec<i32>, max_drafts: usize) {
    let n = offsets.len();
    let inner = |c: &mut dyn Choices| 1 + c.below((n - 2) as u64) as usize;
    match c.weighted(&[56, 1, 1, 1, 1, 1, 1, 1, 2]) {
        0 => {}
        1 => offsets[0] = c.pick(&[1, -1]),
        2 => offsets[n - 1] += c.pick(&[1, -1]),
        3 if n > 2 => {
            let i = inner(c);
            offsets.swap(i, i - 1);
        }
        4 if n > 2 => {
            let i = inner(c);
            offsets[i] = offsets[i - 1];
        }
        5 if n > 2 => {
            let i = inner(c);
            offsets[i] = c.pick(&[-1, i32::MIN, i32::MAX]);
        }
        6 => offsets[n - 1] = c.pick(&[i32::MIN, i32::MAX, -1]),
        7 => {
            let len = c.len_near(n);
            offsets.resize(len, offsets.last().copied().unwrap_or(0) + 1);
        }
        8 if n > 2 => {
            // Request i - 1 runs past the rows (offsets stay increasing up to
            // there), with at most K drafts if some request can.
            let rows = offsets[n - 1];
            let past = |i: usize| offsets[i - 1] as i64 + max_drafts as i64 + 1 > rows as i64;
            let i = (1..n - 1).find(|&i| past(i)).unwrap_or(n - 2);
            let most = offsets[i - 1] as i64 + max_drafts as i64 + 1;
            offsets[i] = (rows as i64 + 1 + c.upto(1) as i64).min(most.max(rows as i64 + 1)) as i32;
        }
        _ => {}
    }
}
