//! What to do with each member's volume when `spec.storage` changes: grow it in place, or,
//! where that cannot be done (another class, a smaller size), mark it for replacement by the
//! rolling update (only with `replaceVolumes`).

use std::collections::BTreeMap;

use crate::units::quantity_bytes;

/// `spec.storage`, as the decisions here need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageWish {
    /// The size asked for, a quantity.
    pub size: String,
    /// The class asked for; `None`: the cluster's default, whatever a volume has.
    pub class_name: Option<String>,
}

/// One PVC as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Volume {
    /// The size its spec asks for, a quantity.
    pub requested: Option<String>,
    pub class_name: Option<String>,
    pub terminating: bool,
}

impl StorageWish {
    fn other_class(&self, v: &Volume) -> bool {
        self.class_name
            .as_ref()
            .is_some_and(|want| v.class_name.as_ref() != Some(want))
    }

    /// Whether the volume can be what the spec asks without replacing it: the same class
    /// (when one is asked for) and not larger than asked (growing is done in place).
    pub fn fits_in_place(&self, v: &Volume) -> bool {
        let size_ok = match (
            quantity_bytes(&self.size),
            v.requested.as_deref().and_then(quantity_bytes),
        ) {
            (Some(want), Some(have)) => have <= want,
            _ => true,
        };
        !self.other_class(v) && size_ok
    }

    /// The volumes to expand to the size asked for: smaller ones of the class asked for,
    /// not being deleted. Unparseable sizes are left alone.
    pub fn to_grow<K: Copy + Ord>(&self, volumes: &BTreeMap<K, Volume>) -> Vec<K> {
        let Some(want) = quantity_bytes(&self.size) else {
            return Vec::new();
        };
        volumes
            .iter()
            .filter(|(_, v)| {
                !v.terminating
                    && !self.other_class(v)
                    && v.requested
                        .as_deref()
                        .and_then(quantity_bytes)
                        .is_some_and(|have| have < want)
            })
            .map(|(k, _)| *k)
            .collect()
    }
}

/// Whether a volume is being expanded: its capacity is still below the size its spec asks
/// for. Unparseable sizes are not.
pub fn expanding(requested: &str, capacity: &str) -> bool {
    matches!(
        (quantity_bytes(requested), quantity_bytes(capacity)),
        (Some(r), Some(c)) if c < r
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_expands_while_its_capacity_is_below_its_request() {
        assert!(expanding("20Gi", "10Gi"));
        assert!(!expanding("10Gi", "10Gi"));
        // Provisioners may round up.
        assert!(!expanding("10G", "10Gi"));
        assert!(!expanding("20Gi", "lots"));
    }

    fn wish(size: &str, class: Option<&str>) -> StorageWish {
        StorageWish {
            size: size.into(),
            class_name: class.map(Into::into),
        }
    }

    fn vol(size: &str, class: &str) -> Volume {
        Volume {
            requested: Some(size.into()),
            class_name: Some(class.into()),
            terminating: false,
        }
    }

    #[test]
    fn a_volume_fits_in_place_unless_its_class_differs_or_it_is_larger() {
        let w = wish("2Gi", Some("fast"));
        assert!(w.fits_in_place(&vol("2Gi", "fast")));
        assert!(
            w.fits_in_place(&vol("1Gi", "fast")),
            "growing is done in place"
        );
        assert!(!w.fits_in_place(&vol("2Gi", "standard")));
        assert!(
            !w.fits_in_place(&vol("4Gi", "fast")),
            "shrinking needs a new volume"
        );
        assert!(wish("2Gi", None).fits_in_place(&vol("2Gi", "standard")));
    }

    #[test]
    fn only_smaller_volumes_of_the_class_asked_for_grow() {
        let w = wish("2Gi", Some("fast"));
        let mut terminating = vol("1Gi", "fast");
        terminating.terminating = true;
        let volumes: BTreeMap<u32, Volume> = [
            (0, vol("1Gi", "fast")),
            (1, vol("2Gi", "fast")),
            (2, vol("1Gi", "standard")),
            (3, terminating),
            (4, vol("4Gi", "fast")),
            (5, Volume::default()),
        ]
        .into();
        assert_eq!(w.to_grow(&volumes), [0]);
        assert!(wish("lots", None).to_grow(&volumes).is_empty());
        assert_eq!(wish("2Gi", None).to_grow(&volumes), [0, 2]);
    }
}
