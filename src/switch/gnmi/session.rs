//! Long-lived gNMI subscriptions: STREAM with SAMPLE at the poll interval, or POLL driven by
//! the exporter's own ticker. Leaves are cached by path; a complete view of the cache is handed
//! over after the target's first sync and then once per interval. A session ends with the
//! error that ended it; the poller reconnects with backoff.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::proto::subscribe_request::Request as SubscribeKind;
use super::proto::subscribe_response::Response as SubscribeAnswer;
use super::proto::subscription_list::Mode;
use super::{
    check_document, choose_encoding, collect_update, connect, proto, render, status_error,
    with_credentials,
};
use super::{GnmiTarget, GnmiUpdate};
use crate::switch::poll_error::{PollError, PollErrorReason};

/// Leaves one target may hold; a target that floods more ends its session instead of growing
/// memory without bound. A 64-port SONiC switch sends about 20 000; at roughly 270 bytes a
/// held leaf, 200 000 bounds a flooding target near 55 MiB (1 000 000 let it take 270 MiB).
pub(crate) const MAX_LEAVES: usize = 200_000;

pub(crate) fn too_many_leaves(max_leaves: usize) -> PollError {
    PollError {
        reason: PollErrorReason::TooManyLeaves,
        detail: format!("the target sent more than {max_leaves} leaves"),
    }
}

/// How a long-lived subscription gets its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMode {
    /// The target samples every interval and pushes (SubscriptionList STREAM, SAMPLE).
    Stream,
    /// The exporter asks every interval on the open stream (SubscriptionList POLL).
    Poll,
}

/// A SubscriptionList request for `paths`; SAMPLE at `sample_interval` for STREAM.
pub(crate) fn subscription(
    paths: &[proto::Path],
    mode: Mode,
    encoding: proto::Encoding,
    sample_interval: Option<Duration>,
) -> proto::SubscribeRequest {
    let (prefix, paths) = super::prefixed(paths);
    let subscription = paths
        .into_iter()
        .map(|path| proto::Subscription {
            path: Some(path),
            mode: if sample_interval.is_some() {
                proto::SubscriptionMode::Sample as i32
            } else {
                proto::SubscriptionMode::TargetDefined as i32
            },
            sample_interval: sample_interval.map_or(0, |i| i.as_nanos() as u64),
            ..Default::default()
        })
        .collect();
    proto::SubscribeRequest {
        request: Some(SubscribeKind::Subscribe(proto::SubscriptionList {
            prefix,
            subscription,
            mode: mode as i32,
            encoding: encoding as i32,
            ..Default::default()
        })),
    }
}

/// The target's leaves as last reported, grouped by the update that carried them: a document
/// (SONiC sends a table as one JSON value) replaces exactly what its previous version carried,
/// so ports that disappear go, and a sample cut short leaves the other documents intact.
struct LeafCache {
    by_update: BTreeMap<String, Vec<GnmiUpdate>>,
    /// Kept up to date at each change: a sum over the map per message would make a flood of
    /// small updates quadratic.
    leaves: usize,
    max_leaves: usize,
}

/// `path` is `root` or lies below it (`root/...`, or a list entry `root[...]`).
fn is_below(path: &str, root: &str) -> bool {
    path.starts_with(root)
        && (path.len() == root.len() || matches!(path.as_bytes()[root.len()], b'/' | b'['))
}

impl LeafCache {
    fn new(max_leaves: usize) -> Self {
        LeafCache {
            by_update: BTreeMap::new(),
            leaves: 0,
            max_leaves,
        }
    }

    /// A gNMI delete: every leaf at or below `root`, whichever update carried it.
    fn delete(&mut self, root: &str) {
        let mut removed = 0;
        self.by_update.retain(|update_path, leaves| {
            if is_below(update_path, root) {
                removed += leaves.len();
                return false;
            }
            let before = leaves.len();
            leaves.retain(|leaf| !is_below(&leaf.path, root));
            removed += before - leaves.len();
            !leaves.is_empty()
        });
        self.leaves -= removed;
    }

    fn apply(&mut self, notification: &proto::Notification) -> Result<(), PollError> {
        let prefix = notification.prefix.as_ref();
        for deleted in &notification.delete {
            self.delete(&render(prefix, Some(deleted)));
        }
        for update in &notification.update {
            check_document(update, self.max_leaves)?;
            let mut leaves = Vec::new();
            let root = collect_update(prefix, update, &mut leaves)?;
            self.leaves += leaves.len();
            if let Some(replaced) = self.by_update.insert(root, leaves) {
                self.leaves -= replaced.len();
            }
            if self.leaves > self.max_leaves {
                return Err(too_many_leaves(self.max_leaves));
            }
        }
        Ok(())
    }

    fn view(&self) -> Vec<GnmiUpdate> {
        let mut view = Vec::with_capacity(self.leaves);
        view.extend(self.by_update.values().flatten().cloned());
        view
    }
}

/// Runs one subscription until it fails; `deliver` receives each complete view with the time
/// its newest leaf arrived. Returns the error that ended the session and whether it delivered
/// anything (the poller resets its backoff then).
pub async fn run(
    target: &GnmiTarget,
    paths: &[proto::Path],
    mode: SessionMode,
    interval: Duration,
    deliver: impl FnMut(Vec<GnmiUpdate>, Instant) + Send,
) -> (PollError, bool) {
    run_capped(target, paths, mode, interval, MAX_LEAVES, deliver).await
}

/// [`run`] with at most `max_leaves` leaves held (a profile's `max_leaves`).
pub(crate) async fn run_capped(
    target: &GnmiTarget,
    paths: &[proto::Path],
    mode: SessionMode,
    interval: Duration,
    max_leaves: usize,
    mut deliver: impl FnMut(Vec<GnmiUpdate>, Instant) + Send,
) -> (PollError, bool) {
    let mut delivered = false;
    let error = match subscribe(
        target,
        paths,
        mode,
        interval,
        max_leaves,
        &mut |view, at| {
            delivered = true;
            deliver(view, at)
        },
    )
    .await
    {
        Ok(never) => match never {},
        Err(e) => e,
    };
    (error, delivered)
}

async fn subscribe(
    target: &GnmiTarget,
    paths: &[proto::Path],
    mode: SessionMode,
    interval: Duration,
    max_leaves: usize,
    deliver: &mut (dyn FnMut(Vec<GnmiUpdate>, Instant) + Send),
) -> Result<std::convert::Infallible, PollError> {
    let timeout = |what: &str| PollError {
        reason: PollErrorReason::Timeout,
        detail: format!("{what} took longer than {:?}", target.timeout),
    };
    let mut client = connect(target).await?;
    let encoding = tokio::time::timeout(target.timeout, choose_encoding(&mut client, target))
        .await
        .map_err(|_| timeout("Capabilities"))??;
    let (requests, outgoing) = mpsc::channel(4);
    let first = match mode {
        SessionMode::Stream => subscription(paths, Mode::Stream, encoding, Some(interval)),
        SessionMode::Poll => subscription(paths, Mode::Poll, encoding, None),
    };
    requests.send(first).await.expect("the receiver is alive");
    let request = with_credentials(target, ReceiverStream::new(outgoing), None)?;
    let mut answers = tokio::time::timeout(target.timeout, client.subscribe(request))
        .await
        .map_err(|_| timeout("opening the subscription"))?
        .map_err(|s| status_error(&s))?
        .into_inner();

    let mut cache = LeafCache::new(max_leaves);
    let mut synced = false;
    let mut changed = false;
    let opened = Instant::now();
    let mut last_message = opened;
    // A SAMPLE stream speaks every interval; silence for two is a dead stream, as is a poll
    // left unanswered.
    let silence_limit = interval * 2 + target.timeout;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            answer = answers.message() => {
                let answer = answer.map_err(|s| status_error(&s))?.ok_or_else(|| PollError {
                    reason: PollErrorReason::StreamClosed,
                    detail: "the target ended the subscription".into(),
                })?;
                last_message = Instant::now();
                match answer.response {
                    Some(SubscribeAnswer::Update(notification)) => {
                        cache.apply(&notification)?;
                        changed = true;
                    }
                    Some(SubscribeAnswer::SyncResponse(_)) => {
                        // STREAM: the initial view is complete. POLL: one answer is complete.
                        synced = true;
                        changed = false;
                        deliver(cache.view(), last_message);
                    }
                    None => {}
                }
            }
            _ = ticker.tick() => {
                if last_message.elapsed() > silence_limit {
                    return Err(PollError {
                        reason: PollErrorReason::Stalled,
                        detail: format!("nothing received for {:?}", last_message.elapsed()),
                    });
                }
                // Updates without a sync response are never served: without this the switch
                // would stay down with no reason for as long as the target keeps talking.
                if !synced && opened.elapsed() > silence_limit {
                    return Err(PollError {
                        reason: PollErrorReason::Stalled,
                        detail: format!(
                            "no sync_response {:?} after subscribing ({} leaves received)",
                            opened.elapsed(),
                            cache.leaves
                        ),
                    });
                }
                match mode {
                    SessionMode::Stream if synced && changed => {
                        changed = false;
                        deliver(cache.view(), last_message);
                    }
                    SessionMode::Stream => {}
                    SessionMode::Poll => {
                        let poll = proto::SubscribeRequest {
                            request: Some(SubscribeKind::Poll(proto::Poll {})),
                        };
                        if requests.send(poll).await.is_err() {
                            return Err(PollError {
                                reason: PollErrorReason::StreamClosed,
                                detail: "the subscription's request stream closed".into(),
                            });
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::gnmi::GnmiValue;

    fn json_update(path: &str, json: &str) -> proto::Update {
        proto::Update {
            path: Some(super::super::parse_path(path).unwrap()),
            val: Some(proto::TypedValue {
                value: Some(proto::typed_value::Value::JsonIetfVal(
                    json.as_bytes().to_vec(),
                )),
            }),
            duplicates: 0,
        }
    }

    fn notification(updates: Vec<proto::Update>, delete: Vec<proto::Path>) -> proto::Notification {
        proto::Notification {
            update: updates,
            delete,
            ..Default::default()
        }
    }

    #[test]
    fn a_document_replaces_what_was_below_it() {
        let mut cache = LeafCache::new(MAX_LEAVES);
        cache
            .apply(&notification(
                vec![json_update(
                    "COUNTERS_DB:COUNTERS/Ethernet*",
                    r#"{"Ethernet0":{"A":"1"},"Ethernet4":{"A":"2"}}"#,
                )],
                vec![],
            ))
            .unwrap();
        assert_eq!(cache.leaves, 2);
        // Ethernet4 is gone from the next sample: its leaf goes too.
        cache
            .apply(&notification(
                vec![json_update(
                    "COUNTERS_DB:COUNTERS/Ethernet*",
                    r#"{"Ethernet0":{"A":"3"}}"#,
                )],
                vec![],
            ))
            .unwrap();
        let view = cache.view();
        assert_eq!(view.len(), 1);
        assert_eq!(view[0].path, "/COUNTERS/Ethernet*/Ethernet0/A");
        assert_eq!(view[0].value, GnmiValue::Text("3".into()));
        // Another document below the first one's path is its own: the next sample of the
        // first leaves it alone.
        cache
            .apply(&notification(
                vec![json_update(
                    "COUNTERS_DB:COUNTERS/Ethernet*/Queues",
                    r#"{"Ethernet0:3":{"B":"4"}}"#,
                )],
                vec![],
            ))
            .unwrap();
        cache
            .apply(&notification(
                vec![json_update(
                    "COUNTERS_DB:COUNTERS/Ethernet*",
                    r#"{"Ethernet0":{"A":"5"}}"#,
                )],
                vec![],
            ))
            .unwrap();
        assert_eq!(cache.view().len(), 2);
        // A sibling whose name merely starts with the root survives a delete of the root.
        cache
            .apply(&notification(
                vec![
                    json_update("/x/ab", r#"{"c": 1}"#),
                    json_update("/x/a", r#"{"c": 2}"#),
                ],
                vec![],
            ))
            .unwrap();
        cache
            .apply(&notification(
                vec![],
                vec![super::super::parse_path("/x/a").unwrap()],
            ))
            .unwrap();
        let paths: Vec<String> = cache.view().into_iter().map(|u| u.path).collect();
        assert!(paths.contains(&"/x/ab/c".to_string()), "{paths:?}");
        assert!(!paths.contains(&"/x/a/c".to_string()), "{paths:?}");
    }

    fn uint_update(path: &str, value: u64) -> proto::Update {
        proto::Update {
            path: Some(super::super::parse_path(path).unwrap()),
            val: Some(proto::TypedValue {
                value: Some(proto::typed_value::Value::UintVal(value)),
            }),
            duplicates: 0,
        }
    }

    #[test]
    fn the_leaf_count_follows_replacements_and_deletes_up_to_the_cap() {
        let mut cache = LeafCache::new(4);
        let doc = |json: &str| notification(vec![json_update("/t/a", json)], vec![]);
        cache.apply(&doc(r#"{"x": 1, "y": 2}"#)).unwrap();
        // The same document again replaces, it does not add.
        cache.apply(&doc(r#"{"x": 3, "y": 4}"#)).unwrap();
        assert_eq!(cache.leaves, 2);
        cache
            .apply(&notification(
                vec![uint_update("/t/b", 1), uint_update("/t/c", 1)],
                vec![],
            ))
            .unwrap();
        assert_eq!(cache.leaves, 4);
        cache
            .apply(&notification(
                vec![],
                vec![super::super::parse_path("/t/a/x").unwrap()],
            ))
            .unwrap();
        assert_eq!(cache.leaves, 3);
        assert_eq!(cache.leaves, cache.view().len());
        cache
            .apply(&notification(vec![uint_update("/t/d", 1)], vec![]))
            .unwrap();
        let err = cache
            .apply(&notification(vec![uint_update("/t/e", 1)], vec![]))
            .unwrap_err();
        assert_eq!(err.reason, PollErrorReason::TooManyLeaves);
        assert!(err.detail.contains("more than 4 leaves"), "{err}");
    }

    #[test]
    fn a_flood_of_new_leaves_is_counted_in_linear_time() {
        // Summing the cache at each message made this 5e9 steps (minutes); counting as leaves
        // come and go keeps it well under a second in a debug build.
        let mut cache = LeafCache::new(MAX_LEAVES);
        let started = Instant::now();
        for i in 0..100_000 {
            cache
                .apply(&notification(
                    vec![uint_update(&format!("/flood/leaf{i}"), 1)],
                    vec![],
                ))
                .unwrap();
        }
        assert_eq!(cache.leaves, 100_000);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
