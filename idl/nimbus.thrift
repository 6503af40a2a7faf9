// The Nimbus service of nimbus-thrift.
//
// Wire contract: every method, argument id, declared exception, struct field id,
// type and requiredness below matches Apache Storm 1.x's Nimbus, so a client
// compiled from Storm's own IDL (Java, Python, streamparse, ...) calls this daemon
// unchanged, and a client compiled from this file can call a Storm 1.x Nimbus.
// Storm methods about blobs, credentials, profiling and log levels are left out: a
// call to one gets TApplicationException UNKNOWN_METHOD.
//
// Transport: framed, binary protocol (strict or old headers), port 6627 by default.
//
// How Storm's notions map onto Spark (see README, "Nimbus on Spark"):
//   topology                       one Spark application (one spark-submit)
//   supervisor                     one Spark worker (the embedded local[*] Spark counts as one)
//   worker (num_workers)           a share of the application's executors
//   executor / task of a component one partition of that component's stage
//   uploaded jar                   a zip of the user's Python code
//   ShellComponent                 execution_command "python", script "package.module.Class"

// Generated Python code is the module `nimbus` (from the file name), so it never
// shadows the nimbus_thrift package.
namespace java nimbus.thrift.generated

union JavaObjectArg {
  1: i32 int_arg;
  2: i64 long_arg;
  3: string string_arg;
  4: bool bool_arg;
  5: binary binary_arg;
  6: double double_arg;
}

struct JavaObject {
  1: required string full_class_name;
  2: required list<JavaObjectArg> args_list;
}

// Marker for groupings that carry no data.
struct NullStruct {
}

struct GlobalStreamId {
  1: required string componentId;
  2: required string streamId;
}

// How the tuples of one stream are split among the tasks of a subscriber.
// Accepted here: fields (an empty list is the global grouping), shuffle, all, none,
// local_or_shuffle. direct and the custom groupings are refused at submit time.
union Grouping {
  1: list<string> fields;
  2: NullStruct shuffle;
  3: NullStruct all;
  4: NullStruct none;
  5: NullStruct direct;
  6: JavaObject custom_object;
  7: binary custom_serialized;
  8: NullStruct local_or_shuffle;
}

struct StreamInfo {
  1: required list<string> output_fields;
  2: required bool direct;
}

// A component implemented outside the JVM. Here: execution_command "python" and
// script "package.module.Class", resolved in the uploaded code.
struct ShellComponent {
  1: string execution_command;
  2: string script;
}

// Only shell is accepted; Java components are refused with InvalidTopologyException.
union ComponentObject {
  1: binary serialized_java;
  2: ShellComponent shell;
  3: JavaObject java_object;
}

struct ComponentCommon {
  1: required map<GlobalStreamId, Grouping> inputs;
  2: required map<string, StreamInfo> streams;     // by stream id
  3: optional i32 parallelism_hint;                // executors; 1 when unset
  4: optional string json_conf;                    // component configuration, a JSON object
}

struct SpoutSpec {
  1: required ComponentObject spout_object;
  2: required ComponentCommon common;
}

struct Bolt {
  1: required ComponentObject bolt_object;
  2: required ComponentCommon common;
}

// Declared by Storm but never implemented there; a non-empty map is refused.
struct StateSpoutSpec {
  1: required ComponentObject state_spout_object;
  2: required ComponentCommon common;
}

// Component ids are unique across the three maps.
struct StormTopology {
  1: required map<string, SpoutSpec> spouts;
  2: required map<string, Bolt> bolts;
  3: required map<string, StateSpoutSpec> state_spouts;
  4: optional list<binary> worker_hooks;
}

exception AlreadyAliveException {
  1: required string msg;
}

exception NotAliveException {
  1: required string msg;
}

// Declared for compatibility; this daemon has no authorizer and never raises it.
exception AuthorizationException {
  1: required string msg;
}

exception InvalidTopologyException {
  1: required string msg;
}

struct TopologySummary {
  1: required string id;
  2: required string name;
  3: required i32 num_tasks;
  4: required i32 num_executors;
  5: required i32 num_workers;
  6: required i32 uptime_secs;
  7: required string status;          // ACTIVE, INACTIVE, REBALANCING or KILLED
513: optional string sched_status;    // what the launcher says: running, starting, failed: ...
514: optional string owner;
}

struct SupervisorSummary {
  1: required string host;
  2: required i32 uptime_secs;
  3: required i32 num_workers;        // slots: executor cores the Spark worker offers
  4: required i32 num_used_workers;
  5: required string supervisor_id;
  6: optional string version = "VERSION_NOT_PROVIDED";
}

struct NimbusSummary {
  1: required string host;
  2: required i32 port;
  3: required i32 uptime_secs;
  4: required bool isLeader;
  5: required string version;
}

// Field 2 is always sent as well: Storm 0.9 clients declare it required.
struct ClusterSummary {
  1: required list<SupervisorSummary> supervisors;
  2: optional i32 nimbus_uptime_secs = 0;
  3: required list<TopologySummary> topologies;
  4: required list<NimbusSummary> nimbuses;
}

struct ErrorInfo {
  1: required string error;
  2: required i32 error_time_secs;
  3: optional string host;
  4: optional i32 port;
}

// Statistics are keyed by time window (":all-time", "600", ...) then by stream.
struct BoltStats {
  1: required map<string, map<GlobalStreamId, i64>> acked;
  2: required map<string, map<GlobalStreamId, i64>> failed;
  3: required map<string, map<GlobalStreamId, double>> process_ms_avg;
  4: required map<string, map<GlobalStreamId, i64>> executed;
  5: required map<string, map<GlobalStreamId, double>> execute_ms_avg;
}

struct SpoutStats {
  1: required map<string, map<string, i64>> acked;
  2: required map<string, map<string, i64>> failed;
  3: required map<string, map<string, double>> complete_ms_avg;
}

union ExecutorSpecificStats {
  1: BoltStats bolt;
  2: SpoutStats spout;
}

struct ExecutorStats {
  1: required map<string, map<string, i64>> emitted;
  2: required map<string, map<string, i64>> transferred;
  3: required ExecutorSpecificStats specific;
  4: required double rate;
}

struct ExecutorInfo {
  1: required i32 task_start;
  2: required i32 task_end;
}

struct ExecutorSummary {
  1: required ExecutorInfo executor_info;
  2: required string component_id;
  3: required string host;
  4: required i32 port;
  5: required i32 uptime_secs;
  7: optional ExecutorStats stats;
}

struct TopologyInfo {
  1: required string id;
  2: required string name;
  3: required i32 uptime_secs;
  4: required list<ExecutorSummary> executors;
  5: required string status;
  6: required map<string, list<ErrorInfo>> errors;   // by component id
513: optional string sched_status;
514: optional string owner;
}

struct KillOptions {
  1: optional i32 wait_secs;          // default: topology.message.timeout.secs (30)
}

struct RebalanceOptions {
  1: optional i32 wait_secs;
  2: optional i32 num_workers;
  3: optional map<string, i32> num_executors;   // by component id
}

struct Credentials {
  1: required map<string, string> creds;
}

enum TopologyInitialStatus {
  ACTIVE = 1,
  INACTIVE = 2
}

struct SubmitOptions {
  1: required TopologyInitialStatus initial_status;
  2: optional Credentials creds;      // accepted and ignored: no authentication here
}

enum TopologyStatus {
  ACTIVE = 1,
  INACTIVE = 2,
  REBALANCING = 3,
  KILLED = 4
}

service Nimbus {
  // uploadedJarLocation is what beginFileUpload returned, after finishFileUpload.
  void submitTopology(1: string name, 2: string uploadedJarLocation, 3: string jsonConf,
                      4: StormTopology topology)
    throws (1: AlreadyAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);
  void submitTopologyWithOpts(1: string name, 2: string uploadedJarLocation,
                              3: string jsonConf, 4: StormTopology topology,
                              5: SubmitOptions options)
    throws (1: AlreadyAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);
  void killTopology(1: string name) throws (1: NotAliveException e, 2: AuthorizationException aze);
  void killTopologyWithOpts(1: string name, 2: KillOptions options)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  void activate(1: string name) throws (1: NotAliveException e, 2: AuthorizationException aze);
  void deactivate(1: string name) throws (1: NotAliveException e, 2: AuthorizationException aze);
  void rebalance(1: string name, 2: RebalanceOptions options)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);

  // Code transfer. An upload expires after nimbus.file.copy.expiration.secs without
  // a chunk; its total size is capped (nimbus-thrift.upload.max.bytes).
  string beginFileUpload() throws (1: AuthorizationException aze);
  void uploadChunk(1: string location, 2: binary chunk) throws (1: AuthorizationException aze);
  void finishFileUpload(1: string location) throws (1: AuthorizationException aze);
  // file: a topology id, or a location returned by beginFileUpload. Returns a session id.
  string beginFileDownload(1: string file) throws (1: AuthorizationException aze);
  // An empty chunk means the end of the file.
  binary downloadChunk(1: string id) throws (1: AuthorizationException aze);

  string getNimbusConf() throws (1: AuthorizationException aze);   // a JSON object
  ClusterSummary getClusterInfo() throws (1: AuthorizationException aze);
  TopologyInfo getTopologyInfo(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  string getTopologyConf(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  StormTopology getTopology(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  StormTopology getUserTopology(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);

  // Added in Storm 1.1; streamparse asks before submitting.
  NimbusSummary getLeader() throws (1: AuthorizationException aze);
  bool isTopologyNameAllowed(1: string name) throws (1: AuthorizationException aze);
}
