//! A node's child names, sorted, cheap to copy whatever their number.
//!
//! A snapshot shares the tree with the live state (`DataTree`'s nodes are behind `Arc`s in a
//! persistent map), so the first change to a node after a snapshot copies that node. A parent
//! changes with every child created under it: copying a `BTreeSet` of a million names would
//! stall the core for tens of milliseconds. Large sets are therefore persistent B-trees whose
//! copy is O(1) and whose changes copy one path; small ones stay a sorted `Vec`, because a
//! persistent B-tree allocates a leaf of 64 slots even for one child and most parents have a
//! handful.

use imbl::OrdSet;

/// Above this many children a set becomes persistent; below half of it, a `Vec` again.
const SMALL_MAX: usize = 32;

/// Child names of one node, in sorted order.
#[derive(Debug, Clone)]
pub(crate) enum ChildSet {
    Small(Vec<Box<str>>),
    Large(OrdSet<Box<str>>),
}

impl Default for ChildSet {
    fn default() -> Self {
        ChildSet::Small(Vec::new())
    }
}

impl ChildSet {
    /// Adds `name`; `false` if it was there already.
    pub(crate) fn insert(&mut self, name: &str) -> bool {
        match self {
            ChildSet::Small(names) => match names.binary_search_by(|n| (**n).cmp(name)) {
                Ok(_) => false,
                Err(at) => {
                    names.insert(at, name.into());
                    if names.len() > SMALL_MAX {
                        *self = ChildSet::Large(std::mem::take(names).into_iter().collect());
                    }
                    true
                }
            },
            ChildSet::Large(names) => names.insert(name.into()).is_none(),
        }
    }

    /// Removes `name`; `false` if it was not there.
    pub(crate) fn remove(&mut self, name: &str) -> bool {
        match self {
            ChildSet::Small(names) => match names.binary_search_by(|n| (**n).cmp(name)) {
                Ok(at) => {
                    names.remove(at);
                    true
                }
                Err(_) => false,
            },
            ChildSet::Large(names) => {
                let removed = names.remove(name).is_some();
                if names.len() < SMALL_MAX / 2 {
                    *self = ChildSet::Small(names.iter().cloned().collect());
                }
                removed
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            ChildSet::Small(names) => names.len(),
            ChildSet::Large(names) => names.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn clear(&mut self) {
        *self = ChildSet::default();
    }

    /// The names in sorted order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        let (small, large) = match self {
            ChildSet::Small(names) => (Some(names.iter()), None),
            ChildSet::Large(names) => (None, Some(names.iter())),
        };
        small
            .into_iter()
            .flatten()
            .chain(large.into_iter().flatten())
            .map(|n| &**n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn behaves_as_a_sorted_set_across_both_forms() {
        let mut set = ChildSet::default();
        let mut model = BTreeSet::new();
        // Up past the switch to a persistent set, and back down below it.
        let names: Vec<String> = (0..100).map(|i| format!("n{}", (i * 37) % 100)).collect();
        for n in &names {
            assert_eq!(set.insert(n), model.insert(n.clone()));
            assert!(!set.insert(n));
        }
        assert!(matches!(set, ChildSet::Large(_)));
        let copy = set.clone();
        for n in names.iter().take(95) {
            assert_eq!(set.remove(n), model.remove(n));
            assert!(!set.remove(n));
            assert_eq!(set.len(), model.len());
            assert!(set.iter().eq(model.iter().map(String::as_str)));
        }
        assert!(matches!(set, ChildSet::Small(_)));
        assert_eq!(copy.len(), 100, "a copy is unaffected by later changes");
        set.clear();
        assert!(set.is_empty());
    }
}
