//! safetensors input and output (the format is documented in `FORMAT.md`).
//!
//! Every problem with an input file becomes one [`Failure::Input`] line naming
//! the file or the tensor and what was expected. Outputs are written to a
//! temporary file in the output's directory and renamed into place, so a
//! failed command never leaves a partial or stale-looking output behind.

use crate::error::{Failure, Result};
use crate::filters::SlotFilters;
use half::{bf16, f16};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use specdec::{Host, Values, ValuesMut};
use std::path::{Path, PathBuf};

/// An input file, read whole.
pub struct InputFile {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl InputFile {
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?;
        Ok(InputFile { path: path.to_owned(), bytes })
    }

    pub fn tensors(&self) -> Result<Tensors<'_>> {
        let st = SafeTensors::deserialize(&self.bytes)
            .map_err(|e| Failure::input(format!("{} is not a valid safetensors file: {e}", self.path.display())))?;
        Ok(Tensors { path: &self.path, st })
    }
}

/// Checks `--output` before anything is computed: it must name a file, not a
/// directory, in a directory that exists, and not be the input file, by the
/// same path or another (`./in.st`, `dir/../in.st`, a symbolic or hard link
/// to it): writing the output would replace the input. Call it once the input
/// has been read (so that it exists).
pub fn check_output(input: &Path, output: &Path) -> Result<()> {
    let bad = |what: String| Err(Failure::input(format!("--output {}: {what}", output.display())));
    if output.file_name().is_none() {
        return bad("names no file, expected the path of a file to write".into());
    }
    let dir = match output.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return bad(format!("directory {} does not exist, expected the path of a file to write", dir.display()));
    }
    if output.is_dir() {
        return bad("is a directory, expected the path of a file to write".into());
    }
    if same_file(input, output) {
        return bad(format!(
            "is the input file (--input {}), which writing it would replace; expected another path",
            input.display()
        ));
    }
    Ok(())
}

/// Whether two paths name the same existing file (same device and inode,
/// following symbolic links). A path that names no file is not the same as any.
#[cfg(unix)]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Whether two paths name the same existing file (the same canonical path;
/// hard links are not detected). A path that names no file is not the same as any.
#[cfg(not(unix))]
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The tensors of an input file, looked up by name with their expected dtype and shape.
pub struct Tensors<'a> {
    path: &'a Path,
    st: SafeTensors<'a>,
}

/// The integer dtypes accepted for scalars (`vocab`, `max_drafts`, ...).
const INT_SCALAR: &[Dtype] = &[Dtype::I32, Dtype::I64, Dtype::U32, Dtype::U64];
/// The dtypes of logits and draft logits.
const FLOAT: &[Dtype] = &[Dtype::F32, Dtype::BF16, Dtype::F16];
/// The shape of the per-slot tensors after `temperature`, as errors name it.
const SLOTS: &str = "[slots] (the length of `temperature`)";
/// The names of the filter tensors (`top_k`, `top_p`, `min_p`): the
/// target's, and those the draft logits were sampled with (`verify`).
pub const FILTERS: [&str; 3] = ["top_k", "top_p", "min_p"];
pub const DRAFT_FILTERS: [&str; 3] = ["draft_top_k", "draft_top_p", "draft_min_p"];

impl<'a> Tensors<'a> {
    /// An input error if the file holds a tensor by a name it no longer has
    /// (`old`, now `new`): such a tensor would otherwise be ignored unnamed.
    pub fn renamed(&self, old: &str, new: &str) -> Result<()> {
        match self.st.tensor(old) {
            Ok(_) => Err(Failure::input(format!("tensor `{old}` is now named `{new}` (CHANGELOG.md)"))),
            Err(_) => Ok(()),
        }
    }

    /// Whether the file holds a tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.st.tensor(name).is_ok()
    }

    fn find(&self, name: &'static str) -> Option<Tensor<'a>> {
        self.st.tensor(name).ok().map(|view| Tensor { name, view })
    }

    /// A tensor that must be present; `expected` describes it ("I32 [rows]").
    fn get(&self, name: &'static str, expected: &str) -> Result<Tensor<'a>> {
        self.find(name).ok_or_else(|| {
            Failure::input(format!("{}: missing tensor `{name}` (expected {expected})", self.path.display()))
        })
    }

    /// `I32` with exactly `dims` (named `label`, e.g. "[rows]").
    pub fn i32s(&self, name: &'static str, label: &str, dims: &[usize]) -> Result<Vec<i32>> {
        let t = self.get(name, &format!("I32 {label}"))?;
        t.dtype_in(&[Dtype::I32])?;
        t.shape_is(label, dims)?;
        Ok(decode(t.view.data(), i32::from_le_bytes))
    }

    /// `I32` of one dimension, any length (named `label`, e.g. "[requests]").
    pub fn i32s_any(&self, name: &'static str, label: &str) -> Result<Vec<i32>> {
        let t = self.get(name, &format!("I32 {label}"))?;
        t.dtype_in(&[Dtype::I32])?;
        if t.view.shape().len() != 1 {
            return Err(t.bad(format!("expected a 1-D shape {label}, found {:?}", t.view.shape())));
        }
        Ok(decode(t.view.data(), i32::from_le_bytes))
    }

    /// `U64` or `I64` with exactly `dims`, as `u64`: `I64` values are taken
    /// bit for bit when `negative_ok` (seeds), else a negative one is an error.
    pub fn u64s(&self, name: &'static str, label: &str, dims: &[usize], negative_ok: bool) -> Result<Vec<u64>> {
        let t = self.get(name, &format!("U64 or I64 {label}"))?;
        t.dtype_in(&[Dtype::U64, Dtype::I64])?;
        t.shape_is(label, dims)?;
        let values = decode(t.view.data(), u64::from_le_bytes);
        if t.view.dtype() == Dtype::I64
            && !negative_ok
            && let Some((i, &v)) = values.iter().enumerate().find(|(_, v)| (**v as i64) < 0)
        {
            return Err(t.bad(format!("entry {i} is {}, expected a value >= 0", v as i64)));
        }
        Ok(values)
    }

    /// A float matrix `[rows, width]` (F32, BF16 or F16).
    pub fn float_matrix(&self, name: &'static str) -> Result<(Floats, usize, usize)> {
        let t = self.get(name, "F32, BF16 or F16 [rows, width]")?;
        t.dtype_in(FLOAT)?;
        let &[rows, width] = t.view.shape() else {
            return Err(t.bad(format!("expected a 2-D shape [rows, width], found {:?}", t.view.shape())));
        };
        Ok((t.floats(), rows, width))
    }

    /// An optional float tensor `[slots, K, width]` (F32, BF16 or F16).
    pub fn float_cube(&self, name: &'static str) -> Result<Option<(Floats, [usize; 3])>> {
        let Some(t) = self.find(name) else { return Ok(None) };
        t.dtype_in(FLOAT)?;
        let &[slots, k, width] = t.view.shape() else {
            return Err(t.bad(format!("expected a 3-D shape [slots, K, width], found {:?}", t.view.shape())));
        };
        if k == 0 {
            return Err(t.bad(format!("expected a shape [slots, K, width] with K >= 1, found {:?}", t.view.shape())));
        }
        Ok(Some((t.floats(), [slots, k, width])))
    }

    /// An integer scalar (shape `[]` or `[1]`; I32, I64, U32 or U64), if
    /// present, widened so that every value of these dtypes is exact.
    pub fn int_scalar(&self, name: &'static str) -> Result<Option<i128>> {
        let Some(t) = self.find(name) else { return Ok(None) };
        t.dtype_in(INT_SCALAR)?;
        t.scalar_shape()?;
        let data = t.view.data();
        let value = match t.view.dtype() {
            Dtype::I32 => i32::from_le_bytes(data.try_into().expect("4 bytes")).into(),
            Dtype::U32 => u32::from_le_bytes(data.try_into().expect("4 bytes")).into(),
            Dtype::I64 => i64::from_le_bytes(data.try_into().expect("8 bytes")).into(),
            _ => u64::from_le_bytes(data.try_into().expect("8 bytes")).into(),
        };
        Ok(Some(value))
    }

    /// A required integer scalar.
    pub fn required_int_scalar(&self, name: &'static str) -> Result<i128> {
        self.get(name, "an integer scalar: I32, I64, U32 or U64, shape [] or [1]")?;
        Ok(self.int_scalar(name)?.expect("present"))
    }

    /// An optional flag: a `U8` or `BOOL` scalar holding 0 or 1.
    pub fn flag(&self, name: &'static str) -> Result<bool> {
        let Some(t) = self.find(name) else { return Ok(false) };
        t.dtype_in(&[Dtype::U8, Dtype::BOOL])?;
        t.scalar_shape()?;
        match t.view.data()[0] {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(t.bad(format!("value {v}, expected 0 or 1"))),
        }
    }

    /// An optional `I32` tensor that is either a scalar (shape `[]`) or has `[rows]` entries.
    pub fn i32_scalar_or_rows(&self, name: &'static str, rows: usize) -> Result<Option<ScalarOrRows>> {
        let Some(t) = self.find(name) else { return Ok(None) };
        t.dtype_in(&[Dtype::I32])?;
        let values = decode(t.view.data(), i32::from_le_bytes);
        match t.view.shape() {
            [] => Ok(Some(ScalarOrRows::Scalar(values[0]))),
            [n] if *n == rows => Ok(Some(ScalarOrRows::Rows(values))),
            s => Err(t.bad(format!("expected shape [] (one for all rows) or [rows] = [{rows}], found {s:?}"))),
        }
    }

    /// The per-slot tables: `temperature` F32 `[slots]` and `seed` U64/I64
    /// `[slots]` (I64 seeds are taken bit for bit).
    pub fn slot_table(&self) -> Result<(Vec<f32>, Vec<u64>)> {
        let t = self.get("temperature", "F32 [slots]")?;
        t.dtype_in(&[Dtype::F32])?;
        let &[slots] = t.view.shape() else {
            return Err(t.bad(format!("expected a 1-D shape [slots], found {:?}", t.view.shape())));
        };
        let temperature = decode(t.view.data(), f32::from_le_bytes);
        let seed = self.u64s("seed", SLOTS, &[slots], true)?;
        Ok((temperature, seed))
    }

    /// The optional sampling filters of `slots` slots, by the tensor names
    /// `names` ([`FILTERS`] or [`DRAFT_FILTERS`]): `top_k` I32, `top_p` and
    /// `min_p` F32, each `[slots]`. Their values are the library's to check.
    pub fn filters(&self, names: [&'static str; 3], slots: usize) -> Result<SlotFilters> {
        let [top_k, top_p, min_p] = names;
        Ok(SlotFilters {
            top_k: self.per_slot(top_k, Dtype::I32, slots, i32::from_le_bytes)?,
            top_p: self.per_slot(top_p, Dtype::F32, slots, f32::from_le_bytes)?,
            min_p: self.per_slot(min_p, Dtype::F32, slots, f32::from_le_bytes)?,
        })
    }

    /// An optional tensor of `dtype` with shape `[slots]`.
    fn per_slot<T, const N: usize>(
        &self,
        name: &'static str,
        dtype: Dtype,
        slots: usize,
        from: fn([u8; N]) -> T,
    ) -> Result<Option<Vec<T>>> {
        let Some(t) = self.find(name) else { return Ok(None) };
        t.dtype_in(&[dtype])?;
        t.shape_is(SLOTS, &[slots])?;
        Ok(Some(decode(t.view.data(), from)))
    }

    /// The vocabulary: the optional `vocab` scalar (`1 ..= width`), else the
    /// width of the logits (tensor `logits`); at most `specdec::MAX_VOCAB`.
    pub fn vocab(&self, width: usize, logits: &str) -> Result<usize> {
        if width == 0 {
            return Err(Failure::input(format!(
                "tensor `{logits}`: width 0, expected a shape [rows, width] with width >= 1 (one column per token id)"
            )));
        }
        let max = width.min(specdec::MAX_VOCAB);
        match self.int_scalar("vocab")? {
            None if width <= max => Ok(width),
            None => Err(Failure::input(format!(
                "tensor `{logits}`: width {width} is more than the largest vocabulary, {max}; \
                 give the vocabulary in a `vocab` scalar"
            ))),
            Some(v) if v >= 1 && v <= max as i128 => Ok(v as usize),
            Some(v) if width > max => {
                Err(Failure::input(format!("tensor `vocab`: value {v}, expected 1 ..= {max} (the largest vocabulary)")))
            }
            Some(v) => Err(Failure::input(format!(
                "tensor `vocab`: value {v}, expected 1 ..= {width} (the width of `{logits}`)"
            ))),
        }
    }
}

/// An `I32` value given once for all rows, or per row.
pub enum ScalarOrRows {
    Scalar(i32),
    Rows(Vec<i32>),
}

/// One tensor of an input file.
struct Tensor<'a> {
    name: &'static str,
    view: TensorView<'a>,
}

impl Tensor<'_> {
    fn bad(&self, what: String) -> Failure {
        Failure::input(format!("tensor `{}`: {what}", self.name))
    }

    fn dtype_in(&self, dtypes: &[Dtype]) -> Result<()> {
        let got = self.view.dtype();
        if dtypes.contains(&got) {
            return Ok(());
        }
        let names: Vec<String> = dtypes.iter().map(|d| d.to_string()).collect();
        Err(self.bad(format!("expected dtype {}, found {got}", names.join(" or "))))
    }

    fn shape_is(&self, label: &str, dims: &[usize]) -> Result<()> {
        let got = self.view.shape();
        if got == dims {
            return Ok(());
        }
        Err(self.bad(format!("expected shape {label} = {dims:?}, found {got:?}")))
    }

    fn scalar_shape(&self) -> Result<()> {
        match self.view.shape() {
            [] | [1] => Ok(()),
            s => Err(self.bad(format!("expected a scalar (shape [] or [1]), found shape {s:?}"))),
        }
    }

    fn floats(&self) -> Floats {
        let data = self.view.data();
        match self.view.dtype() {
            Dtype::F32 => Floats::F32(decode(data, f32::from_le_bytes)),
            Dtype::BF16 => Floats::BF16(decode(data, |b| bf16::from_bits(u16::from_le_bytes(b)))),
            Dtype::F16 => Floats::F16(decode(data, |b| f16::from_bits(u16::from_le_bytes(b)))),
            d => unreachable!("dtype {d} was checked to be a float"),
        }
    }
}

/// Owned logits or draft-logits values in their file dtype.
pub enum Floats {
    F32(Vec<f32>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
}

impl Floats {
    /// The values for a call to read (`Logits`, `DraftLogits`), in their dtype.
    pub fn values(&self) -> Values<'_, Host> {
        match self {
            Floats::F32(v) => Values::F32(&v[..]),
            Floats::BF16(v) => Values::BF16(&v[..]),
            Floats::F16(v) => Values::F16(&v[..]),
        }
    }

    /// The values for a call to write (`DraftLogitsMut`), in their dtype.
    pub fn values_mut(&mut self) -> ValuesMut<'_, Host> {
        match self {
            Floats::F32(v) => ValuesMut::F32(&mut v[..]),
            Floats::BF16(v) => ValuesMut::BF16(&mut v[..]),
            Floats::F16(v) => ValuesMut::F16(&mut v[..]),
        }
    }
}

/// Little-endian elements of `N` bytes.
fn decode<T, const N: usize>(data: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N).map(|c| from(c.try_into().expect("chunks of N bytes"))).collect()
}

fn encode<T: Copy, const N: usize>(values: &[T], to: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| to(v)).collect()
}

/// The tensors of an output file, written all at once by [`Output::write`].
#[derive(Default)]
pub struct Output {
    tensors: Vec<(&'static str, Dtype, Vec<usize>, Vec<u8>)>,
}

impl Output {
    pub fn i32s(mut self, name: &'static str, shape: &[usize], values: &[i32]) -> Self {
        self.tensors.push((name, Dtype::I32, shape.to_vec(), encode(values, i32::to_le_bytes)));
        self
    }

    pub fn f32s(mut self, name: &'static str, shape: &[usize], values: &[f32]) -> Self {
        self.tensors.push((name, Dtype::F32, shape.to_vec(), encode(values, f32::to_le_bytes)));
        self
    }

    pub fn u32s(mut self, name: &'static str, shape: &[usize], values: &[u32]) -> Self {
        self.tensors.push((name, Dtype::U32, shape.to_vec(), encode(values, u32::to_le_bytes)));
        self
    }

    pub fn floats(mut self, name: &'static str, shape: &[usize], values: &Floats) -> Self {
        let (dtype, bytes) = match values {
            Floats::F32(v) => (Dtype::F32, encode(v, f32::to_le_bytes)),
            Floats::BF16(v) => (Dtype::BF16, encode(v, |x: bf16| x.to_bits().to_le_bytes())),
            Floats::F16(v) => (Dtype::F16, encode(v, |x: f16| x.to_bits().to_le_bytes())),
        };
        self.tensors.push((name, dtype, shape.to_vec(), bytes));
        self
    }

    /// Writes the file through a temporary file in the same directory, renamed into place.
    pub fn write(self, path: &Path) -> Result<()> {
        let mut views = Vec::with_capacity(self.tensors.len());
        for (name, dtype, shape, bytes) in &self.tensors {
            let view = TensorView::new(*dtype, shape.clone(), bytes)
                .map_err(|e| Failure::run(format!("tensor `{name}` could not be encoded: {e}")))?;
            views.push((*name, view));
        }
        let bytes = safetensors::serialize(views, None)
            .map_err(|e| Failure::run(format!("the output could not be encoded: {e}")))?;
        let file_name =
            path.file_name().ok_or_else(|| Failure::input(format!("output path {} names no file", path.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(file_name);
        tmp_name.push(format!(".{}.tmp", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let written = std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Failure::run(format!("cannot write {}: {e}", path.display()))
        })
    }
}
