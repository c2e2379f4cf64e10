//! Hashes: a pod template's (what marks a member up to date) and an applied object's (what
//! spares an unchanged Service or PDB a write).

use k8s_openapi::api::core::v1::PodSpec;
use marekvs_api::MarekvsCluster;
use serde_json::{Value, json};

use crate::error::Error;

use super::names::*;

/// [`template_hash`] of a pod's template: its spec and the user's `podLabels` and
/// `podAnnotations` (a change to either rolls the members). Without labels or annotations it
/// is the hash of the spec alone, as it was before they existed, so no running member is
/// rolled by the upgrade that added them.
pub fn pod_template_hash(cr: &MarekvsCluster, spec: &PodSpec) -> Result<String, Error> {
    let spec_value = pod_spec_value(spec)?;
    let (labels, annotations) = (&cr.spec.pod_labels, &cr.spec.pod_annotations);
    if labels.is_empty() && annotations.is_empty() {
        return Ok(template_hash(&spec_value));
    }
    Ok(template_hash(&json!({
        "podSpec": spec_value, "podLabels": labels, "podAnnotations": annotations,
    })))
}

/// A pod spec as a `serde_json::Value`, the form its hash is taken over: the hash every
/// running member carries was taken over the `Value` the former `json!` builder made, whose
/// object keys are sorted (serde_json's map is a `BTreeMap` without its `preserve_order`
/// feature) and which held exactly the fields set here (unset fields are omitted, a set empty
/// list or map is kept). The typed spec serialized to a `Value` is that same `Value`, so the
/// hash is unchanged; serializing the typed spec straight to text would write the fields in
/// struct order instead and change every hash (rolling every member). The golden test
/// (`build_golden`) holds the hashes.
pub(super) fn pod_spec_value(spec: &PodSpec) -> Result<Value, Error> {
    serde_json::to_value(spec).map_err(|source| Error::Serialize {
        what: format!("pod spec {}", spec.hostname.as_deref().unwrap_or_default()),
        source,
    })
}

/// FNV-1a (64 bit) of a JSON value's text (a pod spec's, or a Service's or the PDB's for the
/// applied hash): stable across runs and operator restarts (serde_json
/// writes object keys in a fixed order), and any change to image, env, resources or scheduling
/// changes it.
pub fn template_hash(value: &Value) -> String {
    // `Display` of a `Value` is its compact JSON, the same text as `serde_json::to_string`.
    let text = value.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// What server-side apply sends for a Service or the PDB: `desired` as JSON with its
/// applied-hash annotation (the hash of that JSON without it) beside its own annotations
/// (the client Service's), and the hash.
pub fn applied<K: serde::Serialize>(desired: &K) -> Result<(Value, String), serde_json::Error> {
    let mut value = serde_json::to_value(desired)?;
    let hash = template_hash(&value);
    let annotations = &mut value["metadata"]["annotations"];
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[ANNOTATION_APPLIED_HASH] = json!(hash);
    Ok((value, hash))
}
