//! The e2e suite's own runner: libtest's output, filters and `--test-threads` (through
//! libtest-mimic), plus skips that are decided before a test starts. A test declares what it
//! needs ([`Need`]); where the data plane or the cluster cannot give it, the test is reported
//! `ignored` with the reason printed, never run and never counted as passed.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;

use libtest_mimic::{Arguments, Failed, Trial};

/// Something a test needs beyond a cluster with the operator's CRD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The simulator's control API: faults, load, disk figures, the loss counter. Absent on
    /// real members (`MAREKVS_BIN`) and on kind.
    Simulator,
    /// The simulator's data plane: the test asserts figures sized to it (a loss its ring
    /// makes, a write rate real members on a 2-core harness do not converge at). Absent where
    /// [`Need::Simulator`] is; the benchmarks measure real members (`bench ladder`, `trap`).
    SimulatedDataPlane,
    /// Real marekvs members (`MAREKVS_BIN`, or kind): the test asserts what only the node's own
    /// replication does (a ring that skips entries, anti-entropy that has not yet run), which
    /// the simulator's data plane does not reproduce. The lane `make test` runs when it finds
    /// the real server runs it.
    RealDataPlane,
    /// An operator process of the test's own, which it may kill and restart. Absent where the
    /// operator is deployed (`MAREKVS_E2E_EXTERNAL_OPERATOR`).
    OwnOperator,
    /// The local control plane of `hack/test-e2e.sh`, whose API server the test restarts.
    LocalControlPlane,
    /// The shipped installs: kubectl and helm (`MAREKVS_E2E_KUBECTL`, `MAREKVS_E2E_HELM`), and
    /// a podlet that runs pods of the operator image as the operator binary, with their logs
    /// in `MAREKVS_E2E_POD_LOGS` (`MAREKVS_E2E_OPERATOR_PODS`; hack/test-e2e.sh sets all four).
    Installs,
    /// The machine to itself: the test loads the simulator and the cores so heavily (64 members
    /// answering MiBs on every pass) that tests running beside it time out. Run it alone, with
    /// `MAREKVS_E2E_ALONE=1 hack/test-e2e.sh <its name>`; the suite skips it, saying so.
    Alone,
    /// The API server's audit log of the changes the operator's ServiceAccount asks for
    /// (`MAREKVS_E2E_AUDIT_LOG`; hack/test-e2e.sh starts its API server so).
    AuditLog,
    /// The operator as it stood at the commit `e2e/upgrade-from.env` pins: its binary, run for
    /// pods of the operator image tagged `upgrade-from`, and its `deploy/` tree
    /// (`MAREKVS_E2E_UPGRADE_FROM`, which hack/test-e2e.sh builds), besides [`Need::Installs`].
    UpgradeFrom,
    /// A second local cluster beside the first (`MAREKVS_E2E_SIDE_KUBECONFIG` and the pod
    /// networks of both, which hack/test-e2e.sh sets).
    SideCluster,
}

impl Need {
    /// Why this need is not met here, or `None` when it is.
    pub fn unmet(self) -> Option<&'static str> {
        let set = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
        match self {
            Need::Simulator if !set("MAREKVS_SIM_CONTROL_URL") => Some(
                "needs the simulator's control API (faults, load or the loss counter); members here are not simulated",
            ),
            Need::SimulatedDataPlane if !set("MAREKVS_SIM_CONTROL_URL") => Some(
                "asserts figures of the simulator's data plane (a loss sized to its ring, or 3,000 SET/s, which real members on a 2-core harness do not converge at); hack/bench.sh ladder and trap measure real members",
            ),
            Need::RealDataPlane if set("MAREKVS_SIM_CONTROL_URL") => Some(
                "asserts what only the real node's replication does (a loss a raw delete seconds after writes makes, a ring past its cap, a restart that empties it); members here are simulated: run it with MAREKVS_BIN, as make test's real-member lane does",
            ),
            Need::Alone if !set("MAREKVS_E2E_ALONE") => Some(
                "loads the simulator and the cores so that tests beside it time out: run it alone, MAREKVS_E2E_ALONE=1 hack/test-e2e.sh <its name>",
            ),
            Need::AuditLog if !set("MAREKVS_E2E_AUDIT_LOG") => Some(
                "counts requests in the API server's audit log, which hack/test-e2e.sh has its API server write",
            ),
            Need::OwnOperator if set("MAREKVS_E2E_EXTERNAL_OPERATOR") => {
                Some("kills or restarts the operator, which runs elsewhere here")
            }
            Need::LocalControlPlane
                if std::env::var("MAREKVS_E2E_CLUSTER").as_deref() != Ok("test") =>
            {
                Some("restarts the API server of the local control plane of hack/test-e2e.sh")
            }
            Need::Installs
                if ![
                    "MAREKVS_E2E_KUBECTL",
                    "MAREKVS_E2E_HELM",
                    "MAREKVS_E2E_OPERATOR_PODS",
                    "MAREKVS_E2E_POD_LOGS",
                ]
                .into_iter()
                .all(set) =>
            {
                Some(
                    "needs kubectl, helm and a podlet that runs the operator image (hack/test-e2e.sh)",
                )
            }
            Need::UpgradeFrom if !set("MAREKVS_E2E_UPGRADE_FROM") => Some(
                "needs the operator built at the pinned earlier commit, run by the podlet (hack/test-e2e.sh builds it)",
            ),
            Need::SideCluster
                if ![
                    "MAREKVS_E2E_SIDE_KUBECONFIG",
                    "MAREKVS_E2E_SIDE_POD_NETWORK",
                    "MAREKVS_E2E_SIDE_POD_LOGS",
                    "MAREKVS_E2E_POD_NETWORK",
                ]
                .into_iter()
                .all(set) =>
            {
                Some("needs a second local cluster (hack/test-e2e.sh starts one)")
            }
            _ => None,
        }
    }
}

type TestFuture = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// One e2e test: its name, what it needs, and its body.
pub struct Case {
    name: &'static str,
    needs: &'static [Need],
    body: Box<dyn FnOnce() -> TestFuture + Send>,
}

impl Case {
    pub fn new(
        name: &'static str,
        needs: &'static [Need],
        body: impl FnOnce() -> TestFuture + Send + 'static,
    ) -> Case {
        Case {
            name,
            needs,
            body: Box::new(body),
        }
    }
}

/// The cases of a test file: `cases![test_fn, other_fn needs [Simulator, OwnOperator]]`.
#[macro_export]
macro_rules! cases {
    ($($test:ident $(needs [$($need:ident),* $(,)?])?),* $(,)?) => {
        vec![$(
            $crate::harness::Case::new(
                stringify!($test),
                &[$($($crate::harness::Need::$need),*)?],
                || Box::pin($test()),
            )
        ),*]
    };
}

/// Run the cases as libtest would; each on a runtime of its own (as `#[tokio::test]` does).
/// A skipped case prints `skipped <name>: <reason>` and is reported `ignored`.
pub fn run(cases: Vec<Case>) -> ExitCode {
    // Several name filters, as libtest takes them (libtest-mimic takes one): the runner
    // selects by them itself, and libtest-mimic gets the flags only.
    let (flags, filters) = split_filters(std::env::args().collect());
    let args = Arguments::from_iter(flags);
    let on_real_members = real_lane_runs();
    let trials = cases
        .into_iter()
        .filter(|case| selected(case.name, &filters, args.exact))
        .map(|case| {
            let mut unmet: Vec<&str> = case.needs.iter().filter_map(|n| n.unmet()).collect();
            if on_real_members.iter().any(|t| t == case.name) {
                unmet.push(RUNS_ON_REAL_MEMBERS);
            }
            if !unmet.is_empty() {
                eprintln!("skipped {}: {}", case.name, unmet.join("; "));
            }
            let body = case.body;
            Trial::test(case.name, move || run_one(body)).with_ignored_flag(!unmet.is_empty())
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// Why a test the real-member lane runs is skipped on simulated members.
const RUNS_ON_REAL_MEMBERS: &str = "runs on real marekvs members in this make test's real-member lane (stage e2e-real), which proves what its run on the simulator would and more; without the real server it runs here";

/// The tests `make test`'s real-member lane runs in this same run (`MAREKVS_E2E_REAL_LANE_RUNS`,
/// comma-separated, which hack/test.sh sets where it finds the real server), where members here
/// are simulated; none where they are real.
fn real_lane_runs() -> Vec<String> {
    let simulated = std::env::var_os("MAREKVS_SIM_CONTROL_URL").is_some_and(|v| !v.is_empty());
    tests_run_elsewhere(
        std::env::var("MAREKVS_E2E_REAL_LANE_RUNS").ok().as_deref(),
        simulated,
    )
}

/// The names in `list` (comma-separated) where members here are `simulated`.
fn tests_run_elsewhere(list: Option<&str>, simulated: bool) -> Vec<String> {
    match list {
        Some(list) if simulated => list
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// The flags that take a value, as libtest (and libtest-mimic) name them.
const FLAGS_WITH_A_VALUE: [&str; 5] = [
    "--test-threads",
    "--skip",
    "--logfile",
    "--color",
    "--format",
];

/// The command line without its name filters (the program name and flags, each with its
/// value), and the filters.
fn split_filters(argv: Vec<String>) -> (Vec<String>, Vec<String>) {
    let mut flags = Vec::new();
    let mut filters = Vec::new();
    let mut argv = argv.into_iter();
    flags.extend(argv.next());
    while let Some(a) = argv.next() {
        if FLAGS_WITH_A_VALUE.contains(&a.as_str()) {
            flags.push(a);
            flags.extend(argv.next());
        } else if a.starts_with('-') {
            flags.push(a);
        } else {
            filters.push(a);
        }
    }
    (flags, filters)
}

/// A case runs when no filter is given, or one of them matches its name.
fn selected(name: &str, filters: &[String], exact: bool) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| {
            if exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        })
}

fn run_one(body: Box<dyn FnOnce() -> TestFuture + Send>) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("building the test's runtime: {e}")))?;
    runtime
        .block_on(body())
        .map_err(|e| Failed::from(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_name_filters_select_the_cases_any_of_them_matches() {
        let argv = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let (flags, filters) = split_filters(argv(
            "operator --test-threads 3 scales_3_5_3 --exact reclaim --skip x",
        ));
        assert_eq!(flags, argv("operator --test-threads 3 --exact --skip x"));
        assert_eq!(filters, argv("scales_3_5_3 reclaim"));
        let f = argv("scales_3_5_3 reclaim_pvcs");
        assert!(selected("creates_members_then_scales_3_5_3_x", &f, false));
        assert!(selected("reclaim_pvcs_deletes", &f, false));
        assert!(!selected("pause_holds", &f, false));
        assert!(selected("anything", &[], false));
        assert!(!selected("reclaim_pvcs_deletes", &f, true));
        assert!(selected("reclaim_pvcs", &f, true));
        // libtest-mimic takes what is left.
        let args = Arguments::from_iter(flags);
        assert_eq!(args.test_threads, Some(3));
        assert!(args.exact && args.filter.is_none());
    }

    #[test]
    fn the_real_lanes_tests_are_skipped_only_on_simulated_members() {
        let list = Some("a_test, b_test,,");
        assert_eq!(tests_run_elsewhere(list, true), ["a_test", "b_test"]);
        // The lane itself runs them (its members are real), and without the list nothing is
        // skipped.
        assert!(tests_run_elsewhere(list, false).is_empty());
        assert!(tests_run_elsewhere(None, true).is_empty());
    }
}
