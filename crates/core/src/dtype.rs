//! Logit and draft-logit element types, with bit-level conversions as `const fn`s.
//!
//! The 16-bit types are plain bit containers here (`#[repr(transparent)]` over
//! `u16`, the same layout as `half::bf16`/`half::f16`), so device and CPU code
//! convert with identical integer operations. Narrowing rounds to nearest, ties
//! to even; NaN stays NaN (quieted).

/// The element types logits and draft logits may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DType {
    F32 = 0,
    BF16 = 1,
    F16 = 2,
}

impl DType {
    pub const ALL: [DType; 3] = [DType::F32, DType::BF16, DType::F16];

    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
        }
    }

    /// Whether storing a value of this dtype as `to` can change it: a
    /// narrower mantissa or range. A 16-bit value widened to f32, or any
    /// value kept in its own dtype, stores exactly; bf16 and f16 round into
    /// each other (f16 has fewer exponent bits, bf16 fewer mantissa bits).
    /// Where it can, `gumbel_sample` samples the values as stored (SPEC §3.3).
    pub const fn rounds_into(self, to: DType) -> bool {
        self as u32 != to as u32 && !matches!(to, DType::F32)
    }

    /// The suffix of kernel symbols (`gumbel_sample_bf16_f32`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
        }
    }
}

/// bfloat16 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct Bf16(pub u16);

/// IEEE binary16 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct F16(pub u16);

/// An element of a logits row or of the draft logits.
pub trait Element: Copy {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    fn from_f32(x: f32) -> Self;

    /// Converts from another element type; bit-exact (NaN payloads too) when
    /// the types are the same.
    #[inline(always)]
    fn convert_from<S: Element>(x: S) -> Self {
        if S::DTYPE as u32 == Self::DTYPE as u32 {
            // SAFETY: equal DTYPE means the same type (one impl per DType).
            unsafe { core::mem::transmute_copy(&x) }
        } else {
            Self::from_f32(x.to_f32())
        }
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Element for Bf16 {
    const DTYPE: DType = DType::BF16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16_to_f32(self.0)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        Bf16(f32_to_bf16(x))
    }
}

impl Element for F16 {
    const DTYPE: DType = DType::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16_to_f32(self.0)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        F16(f32_to_f16(x))
    }
}

#[inline(always)]
pub const fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

#[inline(always)]
pub const fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 0x0040) as u16;
    }
    // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit.
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7fff + lsb) >> 16) as u16
}

#[inline(always)]
pub const fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x03ff) as u32;
    let bits = if exp == 0x1f {
        // Inf or NaN (payload kept, quiet bit set as hardware conversion does).
        if man == 0 { sign | 0x7f80_0000 } else { sign | 0x7fc0_0000 | (man << 13) }
    } else if exp != 0 {
        sign | ((exp + 112) << 23) | (man << 13)
    } else if man == 0 {
        sign
    } else {
        // Subnormal: normalise. man = 2^p + rest with p = 31 - lz (p <= 9).
        let p = 31 - man.leading_zeros();
        let e = p + 103; // biased f32 exponent of man · 2^-24
        sign | (e << 23) | ((man << (23 - p)) & 0x007f_ffff)
    };
    f32::from_bits(bits)
}

#[inline(always)]
pub const fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    if abs >= 0x7f80_0000 {
        let man = abs & 0x007f_ffff;
        return if man == 0 { sign | 0x7c00 } else { sign | 0x7e00 | (man >> 13) as u16 };
    }
    if abs >= 0x477f_f000 {
        // >= 65520 rounds to infinity.
        return sign | 0x7c00;
    }
    if abs >= 0x3880_0000 {
        // Normal in f16: rebias the exponent, round 13 bits away (ties to even).
        let lsb = (abs >> 13) & 1;
        let r = abs.wrapping_add(0x0fff + lsb) >> 13;
        return sign | (r - (112 << 10)) as u16;
    }
    if abs < 0x3300_0000 {
        // Below half the smallest subnormal (2^-25): rounds to zero.
        return sign;
    }
    // Subnormal in f16: value = man24 · 2^(e-150); f16 unit is 2^-24.
    let e = abs >> 23;
    let man = (abs & 0x007f_ffff) | 0x0080_0000;
    let shift = 126 - e; // 14..=24 for e in [102, 112]
    let q = man >> shift;
    let rem = man & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    let q = if rem > half || (rem == half && q & 1 == 1) { q + 1 } else { q };
    sign | q as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_to_f32_matches_half_exhaustively() {
        for h in 0..=u16::MAX {
            let ours = f16_to_f32(h);
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn bf16_round_trips_exhaustively() {
        for b in 0..=u16::MAX {
            let x = bf16_to_f32(b);
            // half quiets NaNs on widening; we keep the bits, as the GPU's shift does.
            if !x.is_nan() {
                assert_eq!(x.to_bits(), half::bf16::from_bits(b).to_f32().to_bits());
            }
            if !x.is_nan() {
                assert_eq!(f32_to_bf16(x), b, "{b:#06x}");
            }
        }
    }

    /// Every 61st f32 bit pattern (covers all exponents, both signs, the
    /// subnormal and overflow boundaries), compared with `half`.
    #[test]
    fn narrowing_matches_half() {
        let mut bits = 0u32;
        loop {
            let x = f32::from_bits(bits);
            let (h, b) = (f32_to_f16(x), f32_to_bf16(x));
            let (hh, hb) = (half::f16::from_f32(x), half::bf16::from_f32(x));
            if x.is_nan() {
                assert!(hh.is_nan() && f16_to_f32(h).is_nan() && bf16_to_f32(b).is_nan(), "{bits:#x}");
            } else {
                assert_eq!(h, hh.to_bits(), "f16 of {x:e} ({bits:#x})");
                assert_eq!(b, hb.to_bits(), "bf16 of {x:e} ({bits:#x})");
            }
            match bits.checked_add(61) {
                Some(n) => bits = n,
                None => break,
            }
        }
    }

    #[test]
    fn narrowing_ties_and_boundaries() {
        for x in [65504.0f32, 65519.99, 65520.0, 2f32.powi(-24), 2f32.powi(-25), 1.5 * 2f32.powi(-25), 2f32.powi(-14)] {
            for s in [1.0f32, -1.0] {
                assert_eq!(f32_to_f16(s * x), half::f16::from_f32(s * x).to_bits(), "{x:e}");
            }
        }
    }

    /// `rounds_into` is true exactly where some value changes when stored:
    /// checked over every 16-bit pattern and every 61st f32 pattern.
    #[test]
    fn rounds_into_is_whether_a_store_can_change_a_value() {
        fn changes<S: Element, C: Element>(x: S) -> bool {
            let back = C::convert_from(x).to_f32();
            let x = x.to_f32();
            !(back.to_bits() == x.to_bits() || (back.is_nan() && x.is_nan()))
        }
        fn any_change<S: Element, C: Element>(values: impl Iterator<Item = S>) -> bool {
            values.map(|x| changes::<S, C>(x)).fold(false, |a, b| a | b)
        }
        fn check<S: Element>(values: impl Iterator<Item = S> + Clone) {
            assert_eq!(any_change::<S, f32>(values.clone()), S::DTYPE.rounds_into(DType::F32), "{:?} -> f32", S::DTYPE);
            assert_eq!(
                any_change::<S, Bf16>(values.clone()),
                S::DTYPE.rounds_into(DType::BF16),
                "{:?} -> bf16",
                S::DTYPE
            );
            assert_eq!(any_change::<S, F16>(values), S::DTYPE.rounds_into(DType::F16), "{:?} -> f16", S::DTYPE);
        }
        check((0..=u32::MAX).step_by(61).map(f32::from_bits));
        check((0..=u16::MAX).map(Bf16));
        check((0..=u16::MAX).map(F16));
    }

    #[test]
    fn convert_is_bit_exact_for_equal_types() {
        let snan = Bf16(0x7f81);
        assert_eq!(Bf16::convert_from(snan), snan);
        let snan = F16(0x7c01);
        assert_eq!(F16::convert_from(snan), snan);
        assert_eq!(Bf16::convert_from(1.0f32), Bf16(0x3f80));
        assert_eq!(f32::convert_from(F16(0x3c00)), 1.0);
    }
}
