//! The kubelet's pod-resources API through `pods::pod_resources::list`, against the
//! simulator's server and against kubelets that fail in each way a real one can.

use std::path::Path;
use std::time::{Duration, Instant};

use rdma_fabric_exporter::pods::pod_resources::list;
use rdma_fabric_exporter::pods::AssignedDevice;
use rdma_fabric_exporter::sim::pod_resources_server::{pod, PodResourcesServer};

const TIMEOUT: Duration = Duration::from_secs(2);

fn assigned(pod: &str, container: &str, resource: &str, id: &str) -> AssignedDevice {
    AssignedDevice {
        namespace: "ml".into(),
        pod: pod.into(),
        container: container.into(),
        resource: resource.into(),
        device_id: id.into(),
    }
}

#[tokio::test]
async fn list_returns_every_assigned_device() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let server = PodResourcesServer::start(
        &socket,
        vec![
            // SR-IOV VFs: the SR-IOV network device plugin hands out PCI addresses.
            pod(
                "ml",
                "trainer-0",
                "main",
                &[
                    ("nvidia.com/rdma_vf", &["0000:1a:00.2", "0000:1b:00.2"]),
                    // GPUs pass through; their IDs resolve to no RDMA port.
                    (
                        "nvidia.com/gpu",
                        &["GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"],
                    ),
                ],
            ),
            pod(
                "ml",
                "trainer-1",
                "main",
                &[("intel.com/sriov_rdma", &["0000:3b:00.3"])],
            ),
            // The RDMA shared device plugin: IDs "0".."rdmaHcaMax-1", interchangeable.
            pod(
                "ml",
                "infer-0",
                "server",
                &[("rdma/rdma_shared_device_a", &["7"])],
            ),
            // A pod without devices lists nothing.
            pod("ml", "idle", "main", &[]),
        ],
    )
    .unwrap();

    let devices = list(&socket, TIMEOUT).await.unwrap();
    assert_eq!(
        devices,
        [
            assigned("infer-0", "server", "rdma/rdma_shared_device_a", "7"),
            assigned(
                "trainer-0",
                "main",
                "nvidia.com/gpu",
                "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
            ),
            assigned("trainer-0", "main", "nvidia.com/rdma_vf", "0000:1a:00.2"),
            assigned("trainer-0", "main", "nvidia.com/rdma_vf", "0000:1b:00.2"),
            assigned("trainer-1", "main", "intel.com/sriov_rdma", "0000:3b:00.3"),
        ]
    );

    // The answer follows the pods the server is given.
    server.set_pods(vec![pod(
        "ml",
        "trainer-1",
        "main",
        &[("intel.com/sriov_rdma", &["0000:3b:00.3"])],
    )]);
    assert_eq!(
        list(&socket, TIMEOUT).await.unwrap(),
        [assigned(
            "trainer-1",
            "main",
            "intel.com/sriov_rdma",
            "0000:3b:00.3"
        )]
    );

    server.stop().await;
    assert!(!socket.exists(), "the socket file outlived the server");
    assert_eq!(
        list(&socket, TIMEOUT).await.unwrap_err().reason(),
        "socket_missing"
    );
}

#[tokio::test]
async fn a_missing_socket_is_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let err = list(&dir.path().join("kubelet.sock"), TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "socket_missing", "{err}");
    let err = list(
        Path::new("/nonexistent/pod-resources/kubelet.sock"),
        TIMEOUT,
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), "socket_missing", "{err}");
}

#[tokio::test]
async fn a_socket_nobody_listens_on_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    // The file a kubelet that died leaves behind.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let err = list(&socket, TIMEOUT).await.unwrap_err();
    assert_eq!(err.reason(), "unavailable", "{err}");
}

#[tokio::test]
async fn a_silent_kubelet_is_a_timeout_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    // Accepts, keeps every connection open, never writes a byte.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let bound = Duration::from_millis(500);
    let started = Instant::now();
    let err = list(&socket, bound).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.reason(), "timeout", "{err}");
    assert!(
        took >= bound && took < bound + Duration::from_secs(1),
        "{took:?}"
    );
    silent.abort();
}

#[tokio::test]
async fn a_kubelet_without_list_is_unimplemented() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    // A gRPC server with no services: every method answers UNIMPLEMENTED.
    let server = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .add_routes(tonic::service::Routes::default())
            .serve_with_incoming(incoming)
            .await;
    });
    let err = list(&socket, TIMEOUT).await.unwrap_err();
    assert_eq!(err.reason(), "unimplemented", "{err}");
    server.abort();
}

#[tokio::test]
async fn a_stale_socket_is_replaced_and_other_files_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let server = PodResourcesServer::start(&socket, vec![]).unwrap();
    assert_eq!(list(&socket, TIMEOUT).await.unwrap(), []);
    drop(server);
    assert!(!socket.exists());

    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    assert!(PodResourcesServer::start(&file, vec![]).is_err());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

/// What the collector does with an answer: each device ID to the RDMA ports it reaches. A VF's
/// PCI address reaches the VF's own RDMA device; shared-device and GPU IDs reach nothing.
#[tokio::test]
async fn assigned_vfs_resolve_to_their_rdma_ports() {
    use rdma_fabric_exporter::pods::device_map::resolve;
    use rdma_fabric_exporter::sim::sysfs_tree::{connectx7_node, write_tree};

    let dir = tempfile::tempdir().unwrap();
    let mut nics = connectx7_node(2, 5);
    let mut vf = nics[0].clone();
    vf.name = "mlx5_2".into();
    vf.pci_address = "0000:1a:00.2".into();
    vf.netdev = Some("ens1f0v0".into());
    nics.push(vf);
    let sys = dir.path().join("sys");
    write_tree(&sys, &nics).unwrap();

    let socket = dir.path().join("kubelet.sock");
    let server = PodResourcesServer::start(
        &socket,
        vec![pod(
            "ml",
            "trainer-0",
            "main",
            &[
                ("nvidia.com/rdma_vf", &["0000:1a:00.2"]),
                ("rdma/rdma_shared_device_a", &["0"]),
                (
                    "nvidia.com/gpu",
                    &["GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"],
                ),
            ],
        )],
    )
    .unwrap();
    let reached: Vec<(String, String, u32, String)> = list(&socket, TIMEOUT)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|d| {
            resolve(&sys, &d.device_id)
                .into_iter()
                .map(move |t| (d.resource.clone(), t.device, t.port, t.netdev))
        })
        .collect();
    assert_eq!(
        reached,
        [(
            "nvidia.com/rdma_vf".to_string(),
            "mlx5_2".to_string(),
            1,
            "ens1f0v0".to_string()
        )]
    );
    server.stop().await;
}
