//! A kubelet's pod-resources API for tests and the demo: `List` answers the pods it is given
//! (replaceable while it runs), on a unix socket as the kubelet serves it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

use crate::pods::pod_resources::proto::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use crate::pods::pod_resources::proto::{
    ContainerDevices, ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources,
};

/// A running server; [`PodResourcesServer::stop`] (or drop) ends it and removes its socket.
pub struct PodResourcesServer {
    path: PathBuf,
    pods: Arc<RwLock<Vec<PodResources>>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl PodResourcesServer {
    /// Serves `pods` on a new socket at `path` (a socket left there by an earlier run is
    /// replaced; any other file is an error). Call inside a tokio runtime.
    pub fn start(path: &Path, pods: Vec<PodResources>) -> io::Result<PodResourcesServer> {
        remove_stale_socket(path)?;
        let listener = tokio::net::UnixListener::bind(path)?;
        let pods = Arc::new(RwLock::new(pods));
        let service = PodResourcesListerServer::new(Lister { pods: pods.clone() });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(PodResourcesServer {
            path: path.to_path_buf(),
            pods,
            stop: Some(stop),
            task: Some(task),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the next `List` answers.
    pub fn set_pods(&self, pods: Vec<PodResources>) {
        *self.pods.write().unwrap_or_else(|e| e.into_inner()) = pods;
    }

    /// Stops accepting, lets calls under way finish, and removes the socket file.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for PodResourcesServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

struct Lister {
    pods: Arc<RwLock<Vec<PodResources>>>,
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        let pods = self.pods.read().unwrap_or_else(|e| e.into_inner()).clone();
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: pods,
        }))
    }
}

/// A pod of one container holding `devices`: `(resource, device IDs)`.
pub fn pod(
    namespace: &str,
    name: &str,
    container: &str,
    devices: &[(&str, &[&str])],
) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            devices: devices
                .iter()
                .map(|(resource, ids)| ContainerDevices {
                    resource_name: (*resource).into(),
                    device_ids: ids.iter().map(|id| (*id).into()).collect(),
                    topology: None,
                })
                .collect(),
            ..Default::default()
        }],
    }
}
