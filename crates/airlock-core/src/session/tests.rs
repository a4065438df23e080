//! Sessions made, found, locked and refused, in a temporary state directory.

use super::*;

fn new_session<'a>(ws: &'a Path, name: Option<&'a str>) -> NewSession<'a> {
    NewSession {
        image: None,
        token: None,
        way: Way::of_this_process(),
        workspace: ws,
        name,
        profile: ProfileRef {
            name: "default".into(),
            file: None,
        },
    }
}

#[test]
fn a_session_keeps_its_way_and_is_read_only_that_way() {
    let state = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().canonicalize().unwrap();
    for (made, other) in [
        (Way::UserNamespace, Way::Rootful),
        (Way::Rootful, Way::UserNamespace),
    ] {
        let mut new = new_session(&ws, None);
        new.way = made;
        let session = Session::create(state.path(), new).unwrap();
        let found = Session::find(state.path(), &session.id).unwrap();
        assert_eq!(found.meta.way, made);
        assert_eq!(found.existing_workspace(made).unwrap(), ws);
        let refused = found.existing_workspace(other).unwrap_err();
        assert!(
            matches!(&refused, SessionError::OtherWay { made: why, .. } if *why == made.describe()),
            "{refused:?}"
        );
    }
}

/// Root only (chown); fails rather than skips where CI says the tests run as root.
fn as_root() -> bool {
    let root = nix::unistd::geteuid().is_root();
    assert!(
        root || std::env::var_os("AIRLOCK_TEST_REQUIRE_ROOT").is_none(),
        "this test needs root"
    );
    root
}

#[test]
fn a_record_another_user_could_write_is_not_loaded_nor_mounted_through() {
    if !as_root() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut new = new_session(ws.path(), None);
    new.way = Way::Rootful;
    let session = Session::create(state.path(), new).unwrap();
    // Another uid's session directory (a user's state directory named to root).
    std::os::unix::fs::chown(&session.dir, Some(4242), Some(4242)).unwrap();
    let refused = Session::find(state.path(), &session.id).unwrap_err();
    assert!(
        matches!(&refused, SessionError::Damaged { why, .. } if why.contains("uid 4242")),
        "{refused:?}"
    );
    std::os::unix::fs::chown(&session.dir, Some(0), Some(0)).unwrap();
    // A record that says it has an image, with its layer a symlink elsewhere: mount(2)
    // would follow it; nothing is mounted.
    let elsewhere = tempfile::tempdir().unwrap();
    let mut meta = session.meta.clone();
    meta.image = Some(LayerImage {
        bytes: 8 << 20,
        files: None,
    });
    fs::write(
        session.dir.join("meta.json"),
        serde_json::to_vec(&meta).unwrap(),
    )
    .unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), session.dir.join("layer")).unwrap();
    let refused = Session::find(state.path(), &session.id).unwrap_err();
    assert!(
        matches!(&refused, SessionError::Damaged { why, .. } if why.contains("symlink")),
        "{refused:?}"
    );
}

#[test]
fn records_of_earlier_versions_say_the_way_as_rootful() {
    let record = |way: &str| {
        let text = format!(
            r#"{{"id":"abc","profile":{{"name":"default","file":null}},"workspace":"/w",
                "created":1,"lifecycle":"active"{way}}}"#
        );
        serde_json::from_str::<SessionMeta>(&text).unwrap().way
    };
    assert_eq!(record(r#","way":"rootful""#), Way::Rootful);
    assert_eq!(record(r#","way":"user_namespace""#), Way::UserNamespace);
    assert_eq!(record(r#","rootful":true"#), Way::Rootful);
    assert_eq!(record(r#","rootful":false"#), Way::UserNamespace);
    // Unrecorded: root's sessions were the rootful ones, and a record lives in the state
    // directory of the user who made it.
    let unrecorded = if nix::unistd::geteuid().is_root() {
        Way::Rootful
    } else {
        Way::UserNamespace
    };
    assert_eq!(record(r#","rootful":null"#), unrecorded);
    assert_eq!(record(""), unrecorded);
    let written = serde_json::to_value(
        serde_json::from_str::<SessionMeta>(
            r#"{"id":"abc","profile":{"name":"default","file":null},"workspace":"/w",
                "created":1,"lifecycle":"active","rootful":false}"#,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(written["way"], "user_namespace");
    assert!(written.get("rootful").is_none());
}

#[test]
fn create_find_discard_remove() {
    let state = tempfile::tempdir().unwrap();
    let ws = Path::new("/some/workspace");
    let session = Session::create(state.path(), new_session(ws, Some("fix-tests"))).unwrap();
    assert!(session.upper().is_dir() && session.work().is_dir());
    let again = Session::find(state.path(), &session.id).unwrap();
    assert_eq!(again.dir, session.dir);
    assert_eq!(again.meta.workspace, ws);
    let by_name = Session::find(state.path(), "fix-tests").unwrap();
    assert_eq!(by_name.id, session.id);
    assert!(matches!(
        again.check_workspace(Path::new("/other")),
        Err(SessionError::OtherWorkspace { .. })
    ));
    assert!(matches!(
        Session::find(state.path(), "nope"),
        Err(SessionError::Unknown { .. })
    ));
    assert!(matches!(
        Session::find(state.path(), "../x"),
        Err(SessionError::BadId(_))
    ));
    assert!(matches!(
        Session::create(state.path(), new_session(ws, Some("fix-tests"))),
        Err(SessionError::NameTaken(_))
    ));

    let mut session = again;
    let lock = session.lock_exclusive(&|_| {}).unwrap();
    assert_eq!(session.status(), SessionStatus::Running);
    fs::create_dir(session.work().join("work")).unwrap();
    fs::set_permissions(
        session.work().join("work"),
        fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    session.discard(&lock).unwrap();
    drop(lock);
    assert!(!session.upper().exists() && !session.work().exists());
    let found = Session::find(state.path(), &session.id).unwrap();
    assert_eq!(found.status(), SessionStatus::Discarded);
    assert!(found.check_active().is_err());
    // A discarded session's name can be used again.
    Session::create(state.path(), new_session(ws, Some("fix-tests"))).unwrap();
    found.clone().remove().unwrap();
    assert!(!found.dir.exists());
}

#[test]
fn a_second_exclusive_holder_waits_and_is_told() {
    let state = tempfile::tempdir().unwrap();
    let mut a = Session::create(state.path(), new_session(Path::new("/w"), None)).unwrap();
    let mut b = a.clone();
    let held = a
        .lock_exclusive(&|_| panic!("nobody holds it yet"))
        .unwrap();
    let told = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let told_in_thread = told.clone();
    let waiter = std::thread::spawn(move || {
        b.lock_shared(&|_| told_in_thread.store(true, std::sync::atomic::Ordering::SeqCst))
            .map(drop)
    });
    // Told that it waits (looked for until it is), and still waiting.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !told.load(std::sync::atomic::Ordering::SeqCst) && !waiter.is_finished() {
        assert!(std::time::Instant::now() < deadline, "never told it waits");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!waiter.is_finished(), "a reader must wait for the writer");
    drop(held);
    waiter.join().unwrap().unwrap();
}
