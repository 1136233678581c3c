//! Reading rows four elements at a time: one aligned vector load where the
//! row allows it, else four scalar loads with the tail masked.

use specdec_core::dtype::{Bf16, Element, F16};

/// Elements that can be read four at a time with one aligned vector load.
pub trait Load: Element + Default {
    /// # Safety
    /// `p` is valid for four elements and aligned to four elements' size.
    unsafe fn load4(p: *const Self) -> [Self; 4];
}

#[repr(C, align(16))]
struct Align16<T>([T; 4]);
#[repr(C, align(8))]
struct Align8<T>([T; 4]);

impl Load for f32 {
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> [Self; 4] {
        // SAFETY: valid and 16-byte aligned (caller).
        unsafe { (*(p as *const Align16<f32>)).0 }
    }
}

impl Load for Bf16 {
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> [Self; 4] {
        // SAFETY: valid and 8-byte aligned (caller).
        unsafe { (*(p as *const Align8<Bf16>)).0 }
    }
}

impl Load for F16 {
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> [Self; 4] {
        // SAFETY: valid and 8-byte aligned (caller).
        unsafe { (*(p as *const Align8<F16>)).0 }
    }
}

/// Whether a row starting at `row` can use [`Load::load4`] at every multiple of 4.
#[inline(always)]
pub fn quad_aligned<L>(row: *const L) -> bool {
    (row as usize) % (4 * core::mem::size_of::<L>()) == 0
}

/// Elements `x .. x + n` of `row` (`n = min(4, end − x)`), lanes past `n`
/// holding `L::default()`, and `n`.
///
/// # Safety
/// `row` is valid for `end` elements, `x < end` and `x % 4 == 0`; `aligned`
/// is [`quad_aligned`] of `row`.
#[inline(always)]
pub unsafe fn load_quad<L: Load>(row: *const L, x: u32, end: u32, aligned: bool) -> ([L; 4], u32) {
    let n = if end - x < 4 { end - x } else { 4 };
    if n == 4 && aligned {
        // SAFETY: x + 4 <= end, and x % 4 == 0 keeps the alignment (caller).
        return (unsafe { L::load4(row.add(x as usize)) }, 4);
    }
    // Constant lane indices keep the array in registers.
    // SAFETY: each read is below `end`.
    let lane = |i: usize| if (i as u32) < n { unsafe { *row.add(x as usize + i) } } else { L::default() };
    ([lane(0), lane(1), lane(2), lane(3)], n)
}

/// The four elements widened to f32.
#[inline(always)]
pub fn widen<L: Element>(q: [L; 4]) -> [f32; 4] {
    [q[0].to_f32(), q[1].to_f32(), q[2].to_f32(), q[3].to_f32()]
}

/// Whether any of the first `n` values is NaN.
#[inline(always)]
pub fn any_nan(v: [f32; 4], n: u32) -> bool {
    let lane = |i: usize| (i as u32) < n && v[i].is_nan();
    lane(0) | lane(1) | lane(2) | lane(3)
}
