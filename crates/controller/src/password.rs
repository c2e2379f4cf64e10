//! Password rotation, carried out (the core's `password` module decides): the recorded
//! passwords in the cluster's own Secret `<cluster>-password-applied` (the one every running
//! member last took under `password`, the values set since under `since-0`, `since-1`, ...,
//! newest first), hashes for status, and `CONFIG SET requirepass` on the members the plan
//! names.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use marekvs_api::{MarekvsCluster, PasswordStatus};
use marekvs_core::password::{PasswordPlan, PasswordTaken};
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::ctx::Ctx;
use crate::observe::MemberRead;
use crate::views::{
    APPLIED_KEY, Credentials, Password, Recorded, SINCE_PREFIX, applied_secret_name, owned_by,
};

/// The most values kept beside the settled one (the Secret changed this often within one
/// rotation); the oldest goes first.
pub const MAX_SINCE: usize = 16;

/// `sha256:` and 16 hex digits of the SHA-256 of the cluster's uid and `password`: equal
/// passwords compare equal within a cluster, and nothing is learned across clusters.
pub fn hash(cluster_uid: &str, password: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"marekvs-password\0");
    h.update(cluster_uid.as_bytes());
    h.update(b"\0");
    h.update(password.as_bytes());
    let digest = h.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `status.password`: `None` when the cluster has no password.
pub fn status(cr: &MarekvsCluster, credentials: &Credentials) -> Option<PasswordStatus> {
    let uid = cr.uid().unwrap_or_default();
    let secret_hash = match &credentials.secret {
        Password::None => return None,
        Password::Known(p) => Some(hash(&uid, p)),
        Password::Unreadable => None,
    };
    Some(PasswordStatus {
        secret_hash,
        applied_hash: credentials
            .recorded
            .as_ref()
            .and_then(|r| r.settled.as_deref())
            .map(|r| hash(&uid, r)),
    })
}

/// The hash of the password a member took (`status.members[].passwordHash`).
pub fn member_hash(status: Option<&PasswordStatus>, taken: PasswordTaken) -> Option<String> {
    let s = status?;
    match taken {
        PasswordTaken::Secret => s.secret_hash.clone(),
        PasswordTaken::Recorded => s.applied_hash.clone(),
        PasswordTaken::Unknown | PasswordTaken::Neither => None,
    }
}

/// The record after the plan: the Secret's value remembered newest first, or settled alone.
pub fn next_record(plan: &PasswordPlan, now: &Recorded, secret: &str) -> Option<Recorded> {
    if plan.record {
        return Some(Recorded {
            settled: Some(secret.to_string()),
            since: Vec::new(),
        });
    }
    if !plan.remember {
        return None;
    }
    let mut since = vec![secret.to_string()];
    since.extend(now.since.iter().filter(|p| *p != secret).cloned());
    since.truncate(MAX_SINCE);
    Some(Recorded {
        settled: now.settled.clone(),
        since,
    })
}

/// Carries out the pass's password plan: the record written first (a value is remembered
/// before it is set on anyone), then the Secret's password set live on each member named,
/// after `AUTH` with the recorded one it took (the bytes sent go to the client-input ledger).
pub async fn carry_out(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    plan: &PasswordPlan,
    pods: &BTreeMap<u32, Arc<Pod>>,
    reads: &BTreeMap<u32, MemberRead>,
    credentials: &Credentials,
) {
    let (Password::Known(secret), Some(now)) = (&credentials.secret, &credentials.recorded) else {
        return;
    };
    if let Some(next) = next_record(plan, now, secret) {
        write_record(ctx, cr, next).await;
    }
    let fallbacks = credentials.fallbacks();
    let cluster = (cr.namespace().unwrap_or_default(), cr.name_any());
    for o in &plan.set_on {
        let old = reads
            .get(o)
            .and_then(|r| r.view.fallback)
            .and_then(|i| fallbacks.get(i));
        let (Some(pod), Some(old)) = (pods.get(o), old) else {
            continue;
        };
        let Some(ip) = crate::observe::live_ip(pod) else {
            continue;
        };
        let set = crate::views::set_password(&ip, old, secret, ctx.members.timeout()).await;
        let uid = pod.uid().unwrap_or_default();
        ctx.inputs
            .sent_between_passes(&cluster, *o, &uid, set.sent, crate::ctx::now_ms());
        match set.result {
            Ok(()) => ctx.metrics.actions.inc("password_set"),
            Err(e) => {
                ctx.metrics.actions.inc("password_set_failed");
                warn!(pod = pod.name_any(), "setting the password failed: {e}");
            }
        }
    }
}

/// Writes the record in the cluster's own Secret (server-side apply: keys left out go).
async fn write_record(ctx: &Ctx, cr: &MarekvsCluster, record: Recorded) {
    let name = applied_secret_name(&cr.name_any());
    let secrets: Api<Secret> =
        Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    // Never over a Secret of that name that is not the cluster's.
    match secrets.get_opt(&name).await {
        Ok(Some(s)) if !owned_by(&s, cr) => {
            warn!(
                secret = name,
                "not recording the password: the Secret is not the cluster's"
            );
            return;
        }
        Ok(_) => {}
        Err(e) => {
            warn!("reading the recorded password failed: {e}");
            return;
        }
    }
    let Some(owner) = cr.controller_owner_ref(&()) else {
        return;
    };
    let bytes = |p: &String| ByteString(p.as_bytes().to_vec());
    let mut data: BTreeMap<String, ByteString> = record
        .since
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("{SINCE_PREFIX}{i}"), bytes(p)))
        .collect();
    if let Some(p) = &record.settled {
        data.insert(APPLIED_KEY.to_string(), bytes(p));
    }
    let applied = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            labels: Some(crate::build::selector_labels(cr)),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    let r = secrets
        .patch(
            &name,
            &PatchParams::apply(crate::build::MANAGER).force(),
            &Patch::Apply(&applied),
        )
        .await;
    match r {
        Ok(_) => {
            ctx.passwords.recorded(cr, record);
            ctx.metrics.actions.inc("password_recorded");
        }
        Err(e) => warn!(secret = name, "recording the password failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_the_clusters_own_and_never_the_value() {
        let a = hash("uid-a", "hunter2");
        assert!(a.starts_with("sha256:") && a.len() == 7 + 16, "{a}");
        assert!(!a.contains("hunter2"));
        assert_eq!(a, hash("uid-a", "hunter2"));
        assert_ne!(a, hash("uid-b", "hunter2"), "another cluster, another hash");
        assert_ne!(a, hash("uid-a", "hunter3"));
    }

    /// A value is remembered newest first beside the settled one, at most `MAX_SINCE` of
    /// them; once settled it stands alone. What is written reads back the same.
    #[test]
    fn the_record_remembers_values_newest_first_and_settles_alone() {
        use marekvs_core::password::PasswordState;
        let plan = |remember, record| PasswordPlan {
            remember,
            set_on: Default::default(),
            record,
            state: PasswordState::NoPassword,
            notes: vec![],
        };
        let old = Recorded {
            settled: Some("s1".into()),
            since: vec!["s2".into()],
        };
        assert_eq!(next_record(&plan(false, false), &old, "s3"), None);
        let r = next_record(&plan(true, false), &old, "s3").unwrap();
        assert_eq!(
            (r.settled.as_deref(), r.since.clone()),
            (Some("s1"), vec!["s3".to_string(), "s2".into()])
        );
        let again = next_record(&plan(true, false), &r, "s2").unwrap();
        assert_eq!(again.since, ["s2", "s3"], "each value once");
        let settled = next_record(&plan(false, true), &r, "s3").unwrap();
        assert_eq!(
            (settled.settled.as_deref(), settled.since.len()),
            (Some("s3"), 0)
        );
        let mut many = old.clone();
        for i in 0..40 {
            many = next_record(&plan(true, false), &many, &format!("v{i}")).unwrap();
        }
        assert_eq!(many.since.len(), MAX_SINCE);
        assert_eq!(many.since[0], "v39");
        // Written as keys, read back in order (since-10 after since-9).
        let data: BTreeMap<String, ByteString> = many
            .since
            .iter()
            .enumerate()
            .map(|(i, p)| {
                (
                    format!("{SINCE_PREFIX}{i}"),
                    ByteString(p.clone().into_bytes()),
                )
            })
            .chain([(APPLIED_KEY.to_string(), ByteString(b"s1".to_vec()))])
            .collect();
        let secret = Secret {
            data: Some(data),
            ..Default::default()
        };
        assert_eq!(crate::views::recorded_in(&secret), many);
    }

    #[test]
    fn a_member_shows_the_hash_of_the_password_it_took() {
        let s = PasswordStatus {
            secret_hash: Some("sha256:new".into()),
            applied_hash: Some("sha256:old".into()),
        };
        let of = |t| member_hash(Some(&s), t);
        assert_eq!(of(PasswordTaken::Secret).as_deref(), Some("sha256:new"));
        assert_eq!(of(PasswordTaken::Recorded).as_deref(), Some("sha256:old"));
        assert_eq!(of(PasswordTaken::Neither), None);
        assert_eq!(of(PasswordTaken::Unknown), None);
        assert_eq!(member_hash(None, PasswordTaken::Secret), None);
    }
}
