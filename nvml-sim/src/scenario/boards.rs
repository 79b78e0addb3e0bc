//! A scenario's boards: its `[board.*]` tables and the built-ins, each
//! laid over its `base` chain as typed files (`model::Overlay`: key by
//! key, section by section), each resolved once; and one `[[gpu]]` table
//! checked on its board.

use super::{GpuSpec, IdentityGiven, Place, ScenarioError, Site, MAX_GPUS};
use crate::identity::PciAddr;
use crate::model::{self, BoardFile, Model, Overlay};
use crate::schema::GpuFile;
use crate::value::Invalid;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// How deep `base` chains of boards may go (a loop is refused before).
const MAX_BOARD_DEPTH: usize = 8;

/// Boards by key: the scenario's `[board.*]` tables and the built-ins.
pub(super) struct Boards<'a> {
    defined: &'a BTreeMap<String, toml::Spanned<BoardFile>>,
    resolved: HashMap<String, Arc<Model>>,
}

impl<'a> Boards<'a> {
    /// The file's `[board.*]` tables, each checked and resolved once
    /// (none may hide a built-in board).
    pub(super) fn defined(
        defined: &'a BTreeMap<String, toml::Spanned<BoardFile>>,
        place: &Place<'_>,
    ) -> Result<Self, ScenarioError> {
        for (key, b) in defined {
            if model::BUILTIN_BOARDS.iter().any(|(k, _)| k == key) {
                return Err(place(
                    Site::Board(key),
                    Some(b.span().start),
                    format!("[board.{key}] would hide the built-in board `{key}`: give it another name (with base = \"{key}\")"),
                ));
            }
        }
        let mut boards = Boards {
            defined,
            resolved: HashMap::new(),
        };
        for key in defined.keys() {
            boards.model(key).map_err(|m| {
                place(
                    Site::Board(key),
                    Some(defined[key].span().start),
                    m.into_message(),
                )
            })?;
        }
        Ok(boards)
    }

    /// One `[[gpu]]` table (the `table`th) on a fleet of `fleet` GPUs so
    /// far: its spec on its board, its identity as given, and how many
    /// GPUs it makes.
    pub(super) fn gpu(
        &mut self,
        table: usize,
        spanned: toml::Spanned<GpuFile>,
        fleet: usize,
        place: &Place<'_>,
    ) -> Result<(GpuSpec, IdentityGiven, usize), ScenarioError> {
        let err = |offset: Option<usize>, message: String| place(Site::Gpu(table), offset, message);
        let at = spanned.span().start;
        let g = spanned.into_inner();
        let model = match (&g.model, &g.board) {
            (None, None) => {
                return Err(err(
                    Some(at),
                    "a [[gpu]] needs a `model` (a board) or a `board` table".into(),
                ))
            }
            (Some(m), None) => self
                .model(m.get_ref())
                .map_err(|e| err(Some(m.span().start), e.into_message()))?,
            (m, Some(b)) => {
                if m.is_some() && b.get_ref().base.is_some() {
                    return Err(err(
                        Some(b.span().start),
                        "give `model` or `board.base`, not both".into(),
                    ));
                }
                let base = m
                    .as_ref()
                    .map(|m| m.get_ref().as_str())
                    .or(b.get_ref().base.as_deref());
                self.inline(base, b.get_ref())
                    .map_err(|e| err(Some(b.span().start), e.into_message()))?
            }
        };
        let count = g.count.unwrap_or(1);
        if count == 0 {
            return Err(err(Some(at), "count must be at least 1".into()));
        }
        if fleet.saturating_add(count) > MAX_GPUS {
            return Err(err(
                Some(at),
                format!("count {count} makes more than {MAX_GPUS} GPUs, more than any node holds"),
            ));
        }
        let identity = IdentityGiven {
            uuid: g.uuid.as_ref().map(|u| u.get_ref().clone()),
            serial: g.serial.as_ref().map(|s| s.get_ref().clone()),
            pci: match &g.pci_bus_id {
                None => None,
                Some(b) => Some(PciAddr::parse(b.get_ref()).ok_or_else(|| {
                    err(
                        Some(b.span().start),
                        format!(
                            "pci_bus_id `{}` is not DOMAIN:BUS:DEVICE.FUNCTION in hex, like 00000000:18:00.0",
                            b.get_ref()
                        ),
                    )
                })?),
            },
            minor: g.minor_number,
            offset: Some(at),
            table: Some(table),
        };
        if let Some(u) = &g.uuid {
            if !u.get_ref().starts_with("GPU-") || u.get_ref().len() > 80 {
                return Err(err(
                    Some(u.span().start),
                    format!(
                        "uuid `{}` must start with GPU- (at most 80 characters)",
                        u.get_ref()
                    ),
                ));
            }
        }
        let mut spec = g
            .resolve(&model)
            .map_err(|e| err(e.offset.or(Some(at)), e.error.into_message()))?;
        spec.identity_given = identity.clone();
        Ok((spec, identity, count))
    }

    /// The board `key` as one file, laid over its `base` chain.
    fn file(&self, key: &str, depth: usize) -> Result<BoardFile, Invalid> {
        if depth > MAX_BOARD_DEPTH {
            return Err(Invalid::from(format!(
                "board `{key}`: `base` goes more than {MAX_BOARD_DEPTH} boards deep (a loop?)"
            )));
        }
        if let Some(f) = self.defined.get(key) {
            let f = f.get_ref();
            let base = match &f.base {
                Some(b) => self.file(b, depth + 1)?,
                None => BoardFile::default(),
            };
            return Ok(f.clone().over(base));
        }
        model::builtin_file(key).ok_or_else(|| {
            let mut known: Vec<&str> = self.defined.keys().map(String::as_str).collect();
            known.extend(model::BUILTIN_BOARDS.iter().map(|(k, _)| *k));
            format!("unknown GPU model `{key}` (known: {})", known.join(", ")).into()
        })
    }

    /// A board by key, resolved once.
    fn model(&mut self, key: &str) -> Result<Arc<Model>, Invalid> {
        if let Some(m) = self.resolved.get(key) {
            return Ok(m.clone());
        }
        let m = if self.defined.contains_key(key) {
            Arc::new(self.file(key, 0)?.resolve(key)?)
        } else {
            model::model_by_key(key).ok_or_else(|| self.file(key, 0).err().unwrap_or_default())?
        };
        self.resolved.insert(key.to_string(), m.clone());
        Ok(m)
    }

    /// A board described in a `[[gpu]]` table, on its base if it has one.
    fn inline(&self, base: Option<&str>, over: &BoardFile) -> Result<Arc<Model>, Invalid> {
        let base_file = match base {
            Some(b) => self.file(b, 1)?,
            None => BoardFile::default(),
        };
        over.clone()
            .over(base_file)
            .resolve(base.unwrap_or("inline"))
            .map(Arc::new)
    }
}
