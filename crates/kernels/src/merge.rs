//! A filtered row's `τ` in a sharded call (REFERENCE §9), from the `P`
//! ranks' top-k lists (`specdec_core::shard::TopList`) after round 1: the
//! merge kernels of both operations (`rejection::sharded`, `gumbel`) run
//! [`merge_lists`], a block a row, and `rejection_sample`'s then sums the
//! kept groups for `LSE(S)`.

use crate::gpu;
use specdec_core::filter::{Filter, Group, entry_mass, first_value, join_groups, key, threshold};
use specdec_core::layout::BLOCK_THREADS;
use specdec_core::shard::{self, MAX_TOP_K, TopList};

/// The row's `τ` from the ranks' lists `list(q)`, `q < ranks`, under
/// `filter` over rows of `vocab` ids, as the unsharded call finds it: the
/// lists gathered into the block's dynamic shared memory, sorted largest
/// first (a bitonic sort over their keys), the tie groups formed as
/// `filter::merge_groups` forms them (each entry's mass a thread an entry,
/// the join in thread 0), and `filter::threshold` over them in thread 0,
/// which writes `τ` to `tau_at`. Returns the entries, `n` of them (a power
/// of two): after the call every thread may read them and `*tau_at`, and
/// those of a nonzero count are the row's tie groups, largest first.
///
/// # Safety
/// Every thread of the block calls this together, launched with
/// `shard::merge_entries(ranks)` `Group`s of dynamic shared memory (`ranks <=
/// shard::MAX_FILTERED_RANKS`); `list(q)` is valid for a [`TopList`] for
/// every `q < ranks`; `tau_at` is valid for a write.
#[inline(always)]
pub unsafe fn merge_lists(
    ranks: u32,
    list: impl Fn(u32) -> *const TopList,
    filter: Filter,
    vocab: usize,
    tau_at: *mut f32,
) -> (*mut Group, u32) {
    let tid = gpu::thread_idx_x();
    let n = shard::merge_entries(ranks as usize) as u32;
    // SAFETY (all): the launch's dynamic shared memory holds `n` groups
    // (caller); every access to another thread's entries is between barriers.
    let groups = unsafe { gpu::dynamic_shared::<Group>() };
    let mut j = tid;
    while j < n {
        let (q, at) = (j / MAX_TOP_K, j % MAX_TOP_K);
        let entry = if q < ranks {
            // SAFETY: rank q's list (caller); `at` inside its values.
            unsafe {
                let list = list(q);
                let above = (*list).above.min(MAX_TOP_K - 1);
                if at < above {
                    Group { value: (&raw const (*list).values as *const f32).add(at as usize).read(), count: 1, mass: 0 }
                } else if at == MAX_TOP_K - 1 && (*list).ties > 0 {
                    Group { value: (*list).tie, count: (*list).ties, mass: 0 }
                } else {
                    EMPTY_GROUP
                }
            }
        } else {
            EMPTY_GROUP
        };
        unsafe { groups.add(j as usize).write(entry) };
        j += BLOCK_THREADS;
    }
    // SAFETY (all): every thread of the block is here (caller); the
    // barriers order the phases' accesses to the entries, and thread 0's
    // write of `τ` before any thread reads it.
    unsafe {
        sort_groups(groups, n);
        let max = first_value(core::slice::from_raw_parts(groups, n as usize));
        gpu::sync_threads();
        let mut j = tid;
        while j < n {
            let e = groups.add(j as usize);
            (*e).mass = entry_mass(*e, max);
            j += BLOCK_THREADS;
        }
        gpu::sync_threads();
        if tid == 0 {
            let all = core::slice::from_raw_parts_mut(groups, n as usize);
            let g = join_groups(all);
            tau_at.write(if g == 0 { -f32::MAX } else { threshold(&all[..g], filter, vocab) });
        }
        gpu::sync_threads();
    }
    (groups, n)
}

/// An entry of no value, which sorts last.
const EMPTY_GROUP: Group = Group { value: f32::NEG_INFINITY, count: 0, mass: 0 };

/// Sorts the `n` (a power of two) entries at `groups` largest value first
/// (by `filter::key`; [`EMPTY_GROUP`]s last), a bitonic sort.
///
/// # Safety
/// Every thread of the block calls this together; `groups` is shared
/// memory of `n` entries, written before the call by any thread.
#[inline(always)]
unsafe fn sort_groups(groups: *mut Group, n: u32) {
    let rank = |g: &Group| if g.count == 0 { 0 } else { key(g.value) };
    let mut size = 2;
    while size <= n {
        let mut stride = size / 2;
        while stride > 0 {
            // SAFETY: every thread is here (caller); the loops are uniform.
            unsafe { gpu::sync_threads() };
            let mut a = gpu::thread_idx_x();
            while a < n {
                let b = a ^ stride;
                if b > a {
                    // SAFETY (all): a < b < n, each pair compared by one thread.
                    unsafe {
                        let (x, y) = (groups.add(a as usize).read(), groups.add(b as usize).read());
                        // Descending within blocks whose `size` bit is clear.
                        let descending = a & size == 0;
                        if (rank(&x) < rank(&y)) == descending {
                            groups.add(a as usize).write(y);
                            groups.add(b as usize).write(x);
                        }
                    }
                }
                a += BLOCK_THREADS;
            }
            stride /= 2;
        }
        size *= 2;
    }
    // SAFETY: as above.
    unsafe { gpu::sync_threads() };
}
