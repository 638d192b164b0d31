#[test]
fn every_node_of_the_cluster_is_a_seed_with_the_urls_credentials() {
    let nodes = "\
a1 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460
a2 10.0.0.2:7102@17102 slave a1 0 0 1 connected
a3 :0@0 master,fail,noaddr - 0 0 3 disconnected
";
    assert_eq!(
        super::cluster_seeds("rediss://u:p@127.0.0.1:7101/0", nodes),
        ["rediss://u:p@127.0.0.1:7101/0", "rediss://u:p@10.0.0.2:7102/0"]
    );
    assert_eq!(
        super::cluster_seeds("redis://127.0.0.1:7101", nodes),
        ["redis://127.0.0.1:7101", "redis://10.0.0.2:7102"]
    );
}
