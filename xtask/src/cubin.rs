//! The machine code size of each kernel in a cubin (what `ptxas -o` writes):
//! the sizes of its `.text.<kernel>` sections, which hold the device
//! functions a kernel calls too. A cubin is a 64-bit
//! little-endian ELF file; only its section headers and their names are read.
//!
//! Small calls run a kernel's code cold (an H200 spent about half a small
//! verification's warp time waiting for instructions), so code size is worth
//! watching beside registers and spills.

use std::collections::HashMap;

use crate::Result;

/// `kernel name → bytes of machine code`, for every `.text.<name>` section.
pub fn code_sizes(elf: &[u8]) -> Result<HashMap<String, u64>> {
    let bad = |what: &str| format!("not a 64-bit little-endian ELF cubin: {what}");
    if elf.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err(bad("wrong magic, class or byte order"));
    }
    let u16_at = |at: usize| elf.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |at: usize| elf.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    let u64_at = |at: usize| elf.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    let header = (|| Some((u64_at(0x28)? as usize, u16_at(0x3a)?, u16_at(0x3c)?, u16_at(0x3e)?)))();
    let (table, entry, count, names) = header.ok_or_else(|| bad("header cut short"))?;
    // A section header: name offset (u32) at 0, file offset (u64) at 0x18, size (u64) at 0x20.
    let section = |i: usize| {
        let at = table.checked_add(i.checked_mul(entry)?)?;
        Some((u32_at(at)?, u64_at(at + 0x18)? as usize, u64_at(at + 0x20)?))
    };
    if entry < 0x28 || names >= count {
        return Err(bad("section header table malformed"));
    }
    let (_, names_at, names_len) = section(names).ok_or_else(|| bad("section names out of the file"))?;
    let strings =
        elf.get(names_at..names_at.saturating_add(names_len as usize)).ok_or_else(|| bad("names cut short"))?;
    let name = |offset: usize| {
        let rest = strings.get(offset..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    };
    let mut sizes = HashMap::new();
    for i in 0..count {
        let (name_at, _, size) = section(i).ok_or_else(|| bad("section header out of the file"))?;
        if let Some(function) = name(name_at).and_then(|n| n.strip_prefix(".text.")) {
            sizes.insert(function.to_string(), size);
        }
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF of a header, a section-name table and four section headers
    /// (null, names, two functions' code), with no code bytes: only sizes.
    fn elf() -> Vec<u8> {
        let names = b"\0.shstrtab\0.text.k1\0.text.big_kernel\0";
        let table = 0x40 + names.len();
        let mut elf = vec![0u8; table + 4 * 0x40];
        elf[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        elf[0x28..0x30].copy_from_slice(&(table as u64).to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&4u16.to_le_bytes());
        elf[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        elf[0x40..table].copy_from_slice(names);
        let mut header = |i: usize, name: u32, offset: u64, size: u64| {
            let at = table + i * 0x40;
            elf[at..at + 4].copy_from_slice(&name.to_le_bytes());
            elf[at + 0x18..at + 0x20].copy_from_slice(&offset.to_le_bytes());
            elf[at + 0x20..at + 0x28].copy_from_slice(&size.to_le_bytes());
        };
        header(1, 1, 0x40, names.len() as u64);
        header(2, 11, 0, 1024);
        header(3, 20, 0, 126_080);
        elf
    }

    #[test]
    fn reads_the_text_sections() {
        let sizes = code_sizes(&elf()).unwrap();
        assert_eq!(sizes.len(), 2);
        assert_eq!(sizes["k1"], 1024);
        assert_eq!(sizes["big_kernel"], 126_080);
    }

    #[test]
    fn rejects_what_is_not_a_cubin() {
        assert!(code_sizes(b"\x7fELF\x01\x01").is_err(), "32-bit");
        assert!(code_sizes(b"not an elf at all").is_err());
        let elf = elf();
        assert!(code_sizes(&elf[..0x30]).is_err(), "cut in the header");
        assert!(code_sizes(&elf[..elf.len() - 0x40]).is_err(), "cut in the section headers");
        let mut wrong = elf.clone();
        wrong[0x3e] = 9; // the names' section past the table
        assert!(code_sizes(&wrong).is_err());
    }
}
