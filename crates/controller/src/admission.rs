//! Whether the API server admits the pod the spec now builds for a member: a server-side dry
//! run of its creation (`Action::CheckPod`), asked before a rolling change drains the member,
//! and remembered briefly for the next pass to read (`MemberObs::new_pod`). A spec naming a
//! ServiceAccount or PriorityClass that does not exist, or an env var the API server refuses,
//! then blocks the change before any member is drained, instead of after its pod is deleted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use marekvs_core::PodAdmission;
use tokio::time::Instant;

use crate::build::MANAGER;

/// How long an admission stands: a member is drained within a pass or two of it. Not kept
/// across restarts: an operator that starts again asks again.
pub const ADMITTED_REUSE: Duration = Duration::from_secs(60);
/// How old a refusal is before it is asked again (something outside the spec, a ServiceAccount
/// created, may have fixed it). It stands meanwhile, so the cluster stays Blocked while asking.
pub const ASK_AGAIN_AFTER: Duration = Duration::from_secs(10);
/// A refusal not asked again for this long (its cluster gone, or its spec changed) is
/// forgotten.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The API server's message is cut to this, on a character boundary, before it reaches status.
pub const REFUSAL_MAX_BYTES: usize = 1024;

/// Cluster uid, ordinal, and the template hash of the pod asked about: an answer holds for
/// that pod only.
pub type Key = (String, u32, String);

/// An answer of the API server: admitted, or refused with its message.
type Answer = Option<String>;

#[derive(Default)]
pub struct Admissions {
    answers: Mutex<HashMap<Key, (Answer, Instant)>>,
}

impl Admissions {
    /// What is known of `key`'s pod now.
    pub fn get(&self, key: &Key) -> PodAdmission {
        let answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        let Some((answer, at)) = answers.get(key) else {
            return PodAdmission::Unchecked;
        };
        let age = at.elapsed();
        match answer {
            None if age < ADMITTED_REUSE => PodAdmission::Admitted,
            Some(message) if age < FORGET_AFTER => PodAdmission::Refused {
                message: message.clone(),
                ask_again: age >= ASK_AGAIN_AFTER,
            },
            _ => PodAdmission::Unchecked,
        }
    }

    /// Keeps the answer of a dry run (`Unchecked` keeps nothing).
    pub fn remember(&self, key: Key, answer: PodAdmission) {
        let answer = match answer {
            PodAdmission::Admitted => None,
            PodAdmission::Refused { message, .. } => Some(message),
            PodAdmission::Unchecked => return,
        };
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        answers.retain(|_, (_, at)| at.elapsed() < FORGET_AFTER);
        answers.insert(key, (answer, Instant::now()));
    }
}

/// Asks the API server to create `pod` without persisting it.
pub async fn dry_run(pods: &Api<Pod>, pod: &Pod) -> Result<PodAdmission, kube::Error> {
    let params = PostParams {
        dry_run: true,
        field_manager: Some(MANAGER.into()),
    };
    answer(pods.create(&params, pod).await.map(|_| ()))
}

/// What a dry run's result says. 409 (the name is taken, by the pod it replaces) comes only
/// after admission and validation have passed, so it is admitted. Any other 4xx but 429 is
/// the API server refusing this pod; 429, 5xx and transport errors say nothing about it and
/// are errors (the answer stays unknown).
pub fn answer(result: Result<(), kube::Error>) -> Result<PodAdmission, kube::Error> {
    match result {
        Ok(()) => Ok(PodAdmission::Admitted),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(PodAdmission::Admitted),
        Err(kube::Error::Api(e)) if (400..500).contains(&e.code) && e.code != 429 => {
            Ok(PodAdmission::Refused {
                message: marekvs_api::conditions::cut_text(&e.message, REFUSAL_MAX_BYTES),
                ask_again: false,
            })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, message: &str) -> Result<(), kube::Error> {
        Err(kube::Error::Api(
            kube::core::Status::failure(message, "Reason")
                .with_code(code)
                .boxed(),
        ))
    }

    fn refused(message: &str) -> PodAdmission {
        PodAdmission::Refused {
            message: message.into(),
            ask_again: false,
        }
    }

    #[test]
    fn a_refusal_is_kept_with_its_message_and_an_outage_is_not_an_answer() {
        assert_eq!(answer(Ok(())).unwrap(), PodAdmission::Admitted);
        assert_eq!(
            answer(api_error(409, "pods \"demo-2\" already exists")).unwrap(),
            PodAdmission::Admitted
        );
        let sa = "pods \"demo-2\" is forbidden: error looking up service account ns/nope";
        assert_eq!(answer(api_error(403, sa)).unwrap(), refused(sa));
        assert!(matches!(
            answer(api_error(422, "Invalid value: \"A=B\"")).unwrap(),
            PodAdmission::Refused { .. }
        ));
        for code in [429, 500, 503] {
            assert!(answer(api_error(code, "try later")).is_err(), "{code}");
        }
        let long = "é".repeat(2_000);
        let Ok(PodAdmission::Refused { message, .. }) = answer(api_error(400, &long)) else {
            panic!("a 400 is a refusal");
        };
        assert!(message.len() <= REFUSAL_MAX_BYTES, "{}", message.len());
    }

    #[tokio::test(start_paused = true)]
    async fn an_admission_stands_a_minute_and_a_refusal_stands_while_it_is_asked_again() {
        let admissions = Admissions::default();
        let key = |o: u32| ("uid".to_string(), o, "hash".to_string());
        assert_eq!(admissions.get(&key(1)), PodAdmission::Unchecked);
        admissions.remember(key(1), PodAdmission::Admitted);
        admissions.remember(key(2), refused("no"));
        assert_eq!(admissions.get(&key(1)), PodAdmission::Admitted);
        assert_eq!(admissions.get(&key(2)), refused("no"));
        // Another template: nothing known.
        let other = ("uid".to_string(), 1, "other".to_string());
        assert_eq!(admissions.get(&other), PodAdmission::Unchecked);
        // A refusal 10 s old still holds, and asks to be asked again.
        tokio::time::advance(ASK_AGAIN_AFTER).await;
        assert_eq!(
            admissions.get(&key(2)),
            PodAdmission::Refused {
                message: "no".into(),
                ask_again: true
            }
        );
        admissions.remember(key(2), refused("still no"));
        assert_eq!(admissions.get(&key(2)), refused("still no"));
        tokio::time::advance(ADMITTED_REUSE).await;
        assert_eq!(admissions.get(&key(1)), PodAdmission::Unchecked);
        tokio::time::advance(FORGET_AFTER).await;
        assert_eq!(admissions.get(&key(2)), PodAdmission::Unchecked);
    }
}
