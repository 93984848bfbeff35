//! The kubelet's pod-resources API (v1 `List`) over its unix socket: which devices each
//! container was given. No API server, no token: the socket's file permissions are the access
//! control, so the exporter needs the host directory mounted read-only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Endpoint, Uri};
use tonic::Code;

use super::error::PodsError;
use super::AssignedDevice;

/// Generated from `proto/podresources.proto` by build.rs.
pub mod proto {
    tonic::include_proto!("v1");
}

use proto::pod_resources_lister_client::PodResourcesListerClient;

/// The largest answer decoded: a node's few hundred pods take kilobytes; a kubelet (or
/// something in its place) sending more is refused rather than buffered.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Every device the kubelet assigned, one entry per device ID, sorted. Everything is passed
/// through, GPUs (`nvidia.com/gpu`) included: the caller keeps what [`super::device_map`]
/// resolves to RDMA ports, and a GPU's ID resolves to none. `timeout` bounds the whole call,
/// connecting included.
pub async fn list(socket: &Path, timeout: Duration) -> Result<Vec<AssignedDevice>, PodsError> {
    match tokio::time::timeout(timeout, list_unbounded(socket)).await {
        Ok(result) => result,
        Err(_) => Err(PodsError::Timeout { after: timeout }),
    }
}

async fn list_unbounded(socket: &Path) -> Result<Vec<AssignedDevice>, PodsError> {
    // Told apart before connecting: tonic's connect error buries the cause.
    if let Err(e) = std::fs::metadata(socket) {
        return Err(match e.kind() {
            std::io::ErrorKind::NotFound => PodsError::SocketMissing {
                path: socket.to_path_buf(),
            },
            _ => PodsError::io(socket, e),
        });
    }
    let path: PathBuf = socket.to_path_buf();
    // The URI is never resolved: the connector ignores it and dials the socket.
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| connect_error(socket, &e))?;
    let mut client =
        PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
    let answer = client
        .list(proto::ListPodResourcesRequest {})
        .await
        .map_err(|status| status_error(socket, &status))?;
    Ok(assigned_devices(answer.into_inner()))
}

/// One [`AssignedDevice`] per device ID of every container, sorted and without repeats.
pub(crate) fn assigned_devices(answer: proto::ListPodResourcesResponse) -> Vec<AssignedDevice> {
    let mut devices = Vec::new();
    for pod in answer.pod_resources {
        for container in &pod.containers {
            for assigned in &container.devices {
                for id in &assigned.device_ids {
                    devices.push(AssignedDevice {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: container.name.clone(),
                        resource: assigned.resource_name.clone(),
                        device_id: id.clone(),
                    });
                }
            }
        }
    }
    devices.sort();
    devices.dedup();
    devices
}

fn connect_error(socket: &Path, error: &tonic::transport::Error) -> PodsError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::NotFound => PodsError::SocketMissing {
                    path: socket.to_path_buf(),
                },
                std::io::ErrorKind::PermissionDenied => PodsError::PermissionDenied {
                    path: socket.to_path_buf(),
                },
                // A socket file left by a kubelet that is not running.
                _ => PodsError::Unavailable {
                    detail: format!("{}: {io}", socket.display()),
                },
            };
        }
        cause = e.source();
    }
    PodsError::Unavailable {
        detail: format!("{}: {error}", socket.display()),
    }
}

fn status_error(socket: &Path, status: &tonic::Status) -> PodsError {
    let detail = status.message().to_string();
    match status.code() {
        Code::Unimplemented => PodsError::Unimplemented { detail },
        Code::Unavailable => PodsError::Unavailable { detail },
        Code::PermissionDenied => PodsError::PermissionDenied {
            path: socket.to_path_buf(),
        },
        code => PodsError::Rpc {
            code: format!("{code:?}"),
            detail,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::proto::*;
    use super::*;

    #[test]
    fn every_device_id_is_one_entry() {
        let answer = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "trainer-0".into(),
                namespace: "ml".into(),
                containers: vec![
                    ContainerResources {
                        name: "main".into(),
                        devices: vec![
                            ContainerDevices {
                                resource_name: "nvidia.com/rdma_vf".into(),
                                device_ids: vec!["0000:1a:00.3".into(), "0000:1a:00.2".into()],
                                topology: None,
                            },
                            ContainerDevices {
                                resource_name: "nvidia.com/gpu".into(),
                                device_ids: vec!["GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763".into()],
                                topology: None,
                            },
                        ],
                        ..Default::default()
                    },
                    // A container without devices adds nothing.
                    ContainerResources {
                        name: "sidecar".into(),
                        ..Default::default()
                    },
                ],
            }],
        };
        let devices = assigned_devices(answer);
        let ids: Vec<(&str, &str)> = devices
            .iter()
            .map(|d| (d.resource.as_str(), d.device_id.as_str()))
            .collect();
        assert_eq!(
            ids,
            [
                ("nvidia.com/gpu", "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"),
                ("nvidia.com/rdma_vf", "0000:1a:00.2"),
                ("nvidia.com/rdma_vf", "0000:1a:00.3"),
            ]
        );
        assert!(devices
            .iter()
            .all(|d| d.namespace == "ml" && d.pod == "trainer-0" && d.container == "main"));
    }
}
