//! The dynamic symbol table of this library, edited in place: glibc's
//! lookup skips a defined symbol whose value is 0, so zeroing `st_value` in
//! the mapped `.dynsym` hides a symbol from `dlsym`.

// The ELF structs keep the C field names of <elf.h>.
#![allow(clippy::struct_field_names)]

use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::sync::Mutex;

#[repr(C)]
struct DlPhdrInfo {
    addr: usize,
    name: *const c_char,
    phdr: *const Phdr,
    phnum: u16,
}

#[repr(C)]
struct Phdr {
    p_type: u32,
    p_flags: u32,
    p_offset: u64,
    p_vaddr: u64,
    p_paddr: u64,
    p_filesz: u64,
    p_memsz: u64,
    p_align: u64,
}

#[repr(C)]
struct Dyn {
    d_tag: i64,
    d_val: u64,
}

#[repr(C)]
struct Sym {
    st_name: u32,
    st_info: u8,
    st_other: u8,
    st_shndx: u16,
    st_value: u64,
    st_size: u64,
}

extern "C" {
    fn dl_iterate_phdr(
        cb: unsafe extern "C" fn(*mut DlPhdrInfo, usize, *mut c_void) -> c_int,
        data: *mut c_void,
    ) -> c_int;
    fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
    fn sysconf(name: c_int) -> c_long;
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const PROT_EXEC: c_int = 4;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;
const SC_PAGESIZE: c_int = 30;

/// A byte of this library's image, to find its program headers.
static ANCHOR: u8 = 0;

struct Table {
    symtab: usize,
    strtab: usize,
    count: usize,
    /// Protection of the segment holding `.dynsym`, restored after a
    /// store (and kept, execute included, during it).
    prot: c_int,
}

/// A managed symbol's name, `.dynsym` entry, original value and the
/// protection of its page.
type Entry = (String, usize, u64, c_int);

static FOUND: Mutex<Option<Vec<Entry>>> = Mutex::new(None);

unsafe extern "C" fn visit(info: *mut DlPhdrInfo, _size: usize, data: *mut c_void) -> c_int {
    let info = &*info;
    let anchor = std::ptr::addr_of!(ANCHOR) as usize;
    let phdrs = std::slice::from_raw_parts(info.phdr, info.phnum as usize);
    let ours = phdrs.iter().any(|p| {
        let start = info.addr + p.p_vaddr as usize;
        p.p_type == PT_LOAD && (start..start + p.p_memsz as usize).contains(&anchor)
    });
    if !ours {
        return 0;
    }
    let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
        return 1;
    };
    // glibc relocates most `.dynamic` pointers in place; others are
    // still offsets from the load address.
    let abs = |v: u64| {
        let v = v as usize;
        if v < info.addr {
            v + info.addr
        } else {
            v
        }
    };
    let (mut symtab, mut strtab, mut hash, mut gnu_hash) = (0, 0, 0, 0);
    let mut d = (info.addr + dynamic.p_vaddr as usize) as *const Dyn;
    while (*d).d_tag != DT_NULL {
        match (*d).d_tag {
            DT_SYMTAB => symtab = abs((*d).d_val),
            DT_STRTAB => strtab = abs((*d).d_val),
            DT_HASH => hash = abs((*d).d_val),
            DT_GNU_HASH => gnu_hash = abs((*d).d_val),
            _ => {}
        }
        d = d.add(1);
    }
    if symtab == 0 || strtab == 0 {
        return 1;
    }
    let count = if hash != 0 {
        *(hash as *const u32).add(1) as usize
    } else if gnu_hash != 0 {
        gnu_symbol_count(gnu_hash)
    } else {
        // `.dynstr` follows `.dynsym` in every linker's default layout.
        (strtab.saturating_sub(symtab)) / std::mem::size_of::<Sym>()
    };
    let prot = phdrs
        .iter()
        .find(|p| {
            let start = info.addr + p.p_vaddr as usize;
            p.p_type == PT_LOAD && (start..start + p.p_memsz as usize).contains(&symtab)
        })
        .map_or(PROT_READ, |p| {
            let mut prot = 0;
            if p.p_flags & PF_R != 0 {
                prot |= PROT_READ;
            }
            if p.p_flags & PF_W != 0 {
                prot |= PROT_WRITE;
            }
            if p.p_flags & PF_X != 0 {
                prot |= PROT_EXEC;
            }
            prot
        });
    *data.cast::<Option<Table>>() = Some(Table {
        symtab,
        strtab,
        count,
        prot,
    });
    1
}

/// The symbol count of a GNU hash table: past the highest bucket's
/// chain end.
unsafe fn gnu_symbol_count(table: usize) -> usize {
    let words = table as *const u32;
    let nbuckets = *words as usize;
    let symoffset = *words.add(1) as usize;
    let bloom_words = *words.add(2) as usize;
    let buckets = words.add(4 + bloom_words * 2);
    let chains = buckets.add(nbuckets);
    let mut last = (0..nbuckets)
        .map(|i| *buckets.add(i) as usize)
        .max()
        .unwrap_or(0);
    if last < symoffset {
        return symoffset;
    }
    while *chains.add(last - symoffset) & 1 == 0 {
        last += 1;
    }
    last + 1
}

fn locate() -> Vec<Entry> {
    let mut table: Option<Table> = None;
    // SAFETY: dl_iterate_phdr calls `visit` with valid program headers
    // of each loaded object; `visit` reads only this library's own.
    unsafe {
        dl_iterate_phdr(visit, std::ptr::addr_of_mut!(table).cast());
    }
    let Some(t) = table else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for i in 0..t.count {
        // SAFETY: i < the table's symbol count.
        unsafe {
            let sym = (t.symtab as *const Sym).add(i);
            let name = CStr::from_ptr((t.strtab + (*sym).st_name as usize) as *const c_char);
            if let Ok(name) = name.to_str() {
                // Every NVML export: a branch's absent ones and those a
                // captured driver lacked (`absent_functions`).
                if name.starts_with("nvml") && (*sym).st_value != 0 {
                    found.push((name.to_string(), sym as usize, (*sym).st_value, t.prot));
                }
            }
        }
    }
    found
}

pub fn set_hidden(name: &str, hidden: bool) {
    let mut guard = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    let found = guard.get_or_insert_with(locate);
    let Some((_, entry, original, prot)) = found.iter().find(|(n, ..)| n == name) else {
        return;
    };
    // SAFETY: `entry` is this library's mapped `.dynsym` entry for
    // `name`; its page is made writable only for the store.
    unsafe {
        let sym = *entry as *mut Sym;
        let value = if hidden { 0 } else { *original };
        if (*sym).st_value == value {
            return;
        }
        let page = sysconf(SC_PAGESIZE).max(4096) as usize;
        let start = *entry & !(page - 1);
        let len = (*entry + std::mem::size_of::<Sym>()) - start;
        if mprotect(start as *mut c_void, len, *prot | PROT_WRITE) != 0 {
            return;
        }
        std::ptr::addr_of_mut!((*sym).st_value).write_volatile(value);
        mprotect(start as *mut c_void, len, *prot);
    }
}
