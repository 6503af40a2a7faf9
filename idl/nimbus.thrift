// The Nimbus service of nimbus-thrift.
//
// Wire contract: every method, argument id, declared exception, struct field id,
// type and requiredness below matches Apache Storm 2.x's Nimbus (storm-client's
// storm.thrift, as of 2.8), and through it Storm 1.x's: a client compiled from
// Storm's own IDL of either line (Java, Python, streamparse, ...) calls this daemon
// unchanged, and a client compiled from this file can call a Storm Nimbus.
//
// Where Storm 1.x and 2.x differ:
//   - beginFileDownload is Storm 1.x's (2.x removed it); kept so 1.x clients work.
//   - ClusterSummary field 2 (nimbus_uptime_secs) is 1.x's (2.x removed it); still
//     sent, since Storm 0.9 clients declare it required; a 2.x client skips it.
//   - Fields 2.x added to 1.x structs (TopologySummary, SupervisorSummary,
//     NimbusSummary, TopologyInfo, StormTopology, RebalanceOptions, Credentials) are
//     all optional: a 1.x client skips what it does not know.
//   - deleteBlob declares IllegalStateException (2.x); a 1.x client reads that
//     reply as success, as it would from a Storm 2.x Nimbus.
// Methods with no meaning on Spark (supervisor heartbeats and assignments, worker
// metrics, profiling, ZooKeeper state) are declared too: their calls are answered
// with the declared exception or a TApplicationException saying so, never dropped.
//
// Transport: framed, binary protocol (strict or old headers), port 6627 by default.
//
// How Storm's notions map onto Spark (see docs/topologies.md, "Topologies on Spark",
// and docs/nimbus-api.md):
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

// Storm's shared memory regions (Resource Aware Scheduler); no meaning on Spark.
struct SharedMemory {
  1: required string name;
  2: optional double on_heap;
  3: optional double off_heap_worker;
  4: optional double off_heap_node;
}

// Component ids are unique across the three maps. Fields 5-10 are read and kept
// with the topology, not acted upon (dependencies come from the uploaded code or
// the blob store's topology.blobstore.map).
struct StormTopology {
  1: required map<string, SpoutSpec> spouts;
  2: required map<string, Bolt> bolts;
  3: required map<string, StateSpoutSpec> state_spouts;
  4: optional list<binary> worker_hooks;
  5: optional list<string> dependency_jars;
  6: optional list<string> dependency_artifacts;
  7: optional string storm_version;
  8: optional string jdk_version;
  9: optional map<string, set<string>> component_to_shared_memory;
 10: optional map<string, SharedMemory> shared_memory;
}

exception AlreadyAliveException {
  1: required string msg;
}

exception NotAliveException {
  1: required string msg;
}

// The caller may not make this call (nimbus.admins, nimbus.users, topology.users,
// topology.readonly.users, a blob's ACL).
exception AuthorizationException {
  1: required string msg;
}

exception InvalidTopologyException {
  1: required string msg;
}

// No blob with that key.
exception KeyNotFoundException {
  1: required string msg;
}

exception IllegalStateException {
  1: required string msg;
}

// beginCreateBlob of a key that exists.
exception KeyAlreadyExistsException {
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
  8: optional string storm_version;
  9: optional string topology_version;
513: optional string sched_status;    // what the launcher says: running, starting, failed: ...
514: optional string owner;
515: optional i32 replication_count;
521: optional double requested_memonheap;     // MB
522: optional double requested_memoffheap;    // MB
523: optional double requested_cpu;           // percent of a core (100 = one core)
524: optional double assigned_memonheap;
525: optional double assigned_memoffheap;
526: optional double assigned_cpu;
527: optional map<string, double> requested_generic_resources;
528: optional map<string, double> assigned_generic_resources;
}

struct SupervisorSummary {
  1: required string host;
  2: required i32 uptime_secs;
  3: required i32 num_workers;        // slots: executor cores the Spark worker offers
  4: required i32 num_used_workers;
  5: required string supervisor_id;
  6: optional string version = "VERSION_NOT_PROVIDED";
  7: optional map<string, double> total_resources;
  8: optional double used_mem;
  9: optional double used_cpu;
 10: optional double fragmented_mem;
 11: optional double fragmented_cpu;
 12: optional bool blacklisted;
 13: optional map<string, double> used_generic_resources;
}

struct NimbusSummary {
  1: required string host;
  2: required i32 port;
  3: required i32 uptime_secs;
  4: required bool isLeader;
  5: required string version;         // this daemon's version, e.g. "0.1.0"
  6: optional i32 tlsPort;
}

// Field 2 is always sent as well: Storm 0.9 clients declare it required (Storm
// 1.x made it optional, 2.x removed it).
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

// Tuple sampling of a topology or component (the debug method).
struct DebugOptions {
  1: optional bool enable;
  2: optional double samplingpct;
}

struct TopologyInfo {
  1: required string id;
  2: required string name;
  3: required i32 uptime_secs;
  4: required list<ExecutorSummary> executors;
  5: required string status;
  6: required map<string, list<ErrorInfo>> errors;   // by component id
  7: optional map<string, DebugOptions> component_debug;
  8: optional string storm_version;
513: optional string sched_status;
514: optional string owner;
515: optional i32 replication_count;
521: optional double requested_memonheap;
522: optional double requested_memoffheap;
523: optional double requested_cpu;
524: optional double assigned_memonheap;
525: optional double assigned_memoffheap;
526: optional double assigned_cpu;
}

struct KillOptions {
  1: optional i32 wait_secs;          // default: topology.message.timeout.secs (30)
}

struct RebalanceOptions {
  1: optional i32 wait_secs;
  2: optional i32 num_workers;
  3: optional map<string, i32> num_executors;   // by component id
  4: optional map<string, map<string, double>> topology_resources_overrides;
  5: optional string topology_conf_overrides;
  6: optional string principal;       // set by Nimbus; ignored when a client sends it
}

struct Credentials {
  1: required map<string, string> creds;
  2: optional string topoOwner;
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

// --- page info (the Storm UI's pages) ------------------------------------------
// Windows are ":all-time", "600", "10800" and "86400" (seconds, as strings).

struct CommonAggregateStats {
  1: optional i32 num_executors;
  2: optional i32 num_tasks;
  3: optional i64 emitted;
  4: optional i64 transferred;
  5: optional i64 acked;
  6: optional i64 failed;
  7: optional map<string, double> resources_map;
}

struct SpoutAggregateStats {
  1: optional double complete_latency_ms;
}

struct BoltAggregateStats {
  1: optional double execute_latency_ms;
  2: optional double process_latency_ms;
  3: optional i64 executed;
  4: optional double capacity;
}

union SpecificAggregateStats {
  1: BoltAggregateStats bolt;
  2: SpoutAggregateStats spout;
}

enum ComponentType {
  BOLT = 1,
  SPOUT = 2
}

struct ComponentAggregateStats {
  1: optional ComponentType type;
  2: optional CommonAggregateStats common_stats;
  3: optional SpecificAggregateStats specific_stats;
  4: optional ErrorInfo last_error;
}

struct TopologyStats {
  1: optional map<string, i64> window_to_emitted;
  2: optional map<string, i64> window_to_transferred;
  3: optional map<string, double> window_to_complete_latencies_ms;
  4: optional map<string, i64> window_to_acked;
  5: optional map<string, i64> window_to_failed;
}

struct WorkerSummary {
  1: optional string supervisor_id;
  2: optional string host;
  3: optional i32 port;
  4: optional string topology_id;
  5: optional string topology_name;
  6: optional i32 num_executors;
  7: optional map<string, i64> component_to_num_tasks;
  8: optional i32 time_secs;
  9: optional i32 uptime_secs;
521: optional double requested_memonheap;
522: optional double requested_memoffheap;
523: optional double requested_cpu;
524: optional double assigned_memonheap;
525: optional double assigned_memoffheap;
526: optional double assigned_cpu;
527: optional string owner;
}

struct SupervisorPageInfo {
  1: optional list<SupervisorSummary> supervisor_summaries;
  2: optional list<WorkerSummary> worker_summaries;
}

struct TopologyPageInfo {
  1: required string id;
  2: optional string name;
  3: optional i32 uptime_secs;
  4: optional string status;
  5: optional i32 num_tasks;
  6: optional i32 num_workers;
  7: optional i32 num_executors;
  8: optional string topology_conf;                                 // JSON
  9: optional map<string, ComponentAggregateStats> id_to_spout_agg_stats;
 10: optional map<string, ComponentAggregateStats> id_to_bolt_agg_stats;
 11: optional string sched_status;
 12: optional TopologyStats topology_stats;
 13: optional string owner;
 14: optional DebugOptions debug_options;
 15: optional i32 replication_count;
 16: optional list<WorkerSummary> workers;
 17: optional string storm_version;
 18: optional string topology_version;
521: optional double requested_memonheap;
522: optional double requested_memoffheap;
523: optional double requested_cpu;
524: optional double assigned_memonheap;
525: optional double assigned_memoffheap;
526: optional double assigned_cpu;
527: optional double requested_regular_on_heap_memory;
528: optional double requested_shared_on_heap_memory;
529: optional double requested_regular_off_heap_memory;
530: optional double requested_shared_off_heap_memory;
531: optional double assigned_regular_on_heap_memory;
532: optional double assigned_shared_on_heap_memory;
533: optional double assigned_regular_off_heap_memory;
534: optional double assigned_shared_off_heap_memory;
535: optional map<string, double> requested_generic_resources;
536: optional map<string, double> assigned_generic_resources;
}

struct ExecutorAggregateStats {
  1: optional ExecutorSummary exec_summary;
  2: optional ComponentAggregateStats stats;
}

struct ComponentPageInfo {
  1: required string component_id;
  2: required ComponentType component_type;
  3: optional string topology_id;
  4: optional string topology_name;
  5: optional i32 num_executors;
  6: optional i32 num_tasks;
  7: optional map<string, ComponentAggregateStats> window_to_stats;
  8: optional map<GlobalStreamId, ComponentAggregateStats> gsid_to_input_stats;
  9: optional map<string, ComponentAggregateStats> sid_to_output_stats;
 10: optional list<ExecutorAggregateStats> exec_stats;
 11: optional list<ErrorInfo> errors;
 12: optional string eventlog_host;
 13: optional i32 eventlog_port;
 14: optional DebugOptions debug_options;
 15: optional string topology_status;
 16: optional map<string, double> resources_map;
}

// --- getTopologyInfo*WithOpts --------------------------------------------------------
// Which errors of each component TopologyInfo.errors carries: all, none, or only the
// latest. The values are implicit (0, 1, 2), as in Storm.
enum NumErrorsChoice {
  ALL,
  NONE,
  ONE
}

struct GetInfoOptions {
  1: optional NumErrorsChoice num_err_choice;     // ALL when unset
}

// --- blob store --------------------------------------------------------------------
enum AccessControlType {
  OTHER = 1,
  USER = 2
}

// One ACL entry: access is a bit mask, READ 0x1, WRITE 0x2, ADMIN 0x4.
struct AccessControl {
  1: required AccessControlType type;
  2: optional string name;            // the user, for type USER
  3: required i32 access;
}

struct SettableBlobMeta {
  1: required list<AccessControl> acl;
  2: optional i32 replication_factor;
}

struct ReadableBlobMeta {
  1: required SettableBlobMeta settable;
  2: required i64 version;            // changes whenever the content changes
}

struct ListBlobsResult {
  1: required list<string> keys;
  2: required string session;         // pass back to listBlobs for the next page
}

struct BeginDownloadResult {
  1: required i64 version;
  2: required string session;
  3: optional i64 data_size;
}

// --- dynamic log levels ------------------------------------------------------------
enum LogLevelAction {
  UNCHANGED = 1,
  UPDATE = 2,
  REMOVE = 3
}

struct LogLevel {
  1: required LogLevelAction action;
  2: optional string target_log_level;            // e.g. DEBUG
  3: optional i32 reset_log_level_timeout_secs;   // 0: never reset
  4: optional i64 reset_log_level_timeout_epoch;  // set by Nimbus
  5: optional string reset_log_level;             // the level after the timeout
}

struct LogConfig {
  2: optional map<string, LogLevel> named_logger_level;   // by logger name, ROOT too
}

// --- profiling (JVM actions: none on Spark) -----------------------------------------
struct NodeInfo {
  1: required string node;
  2: required set<i64> port;
}

// The values are implicit (0 to 5), as in Storm.
enum ProfileAction {
  JPROFILE_STOP,
  JPROFILE_START,
  JPROFILE_DUMP,
  JMAP_DUMP,
  JSTACK_DUMP,
  JVM_RESTART
}

struct ProfileRequest {
  1: required NodeInfo nodeInfo;
  2: required ProfileAction action;
  3: optional i64 time_stamp;
}

// --- history and owners ----------------------------------------------------------------
struct TopologyHistoryInfo {
  1: list<string> topo_ids;
}

struct OwnerResourceSummary {
  1: required string owner;
  2: optional i32 total_topologies;
  3: optional i32 total_executors;
  4: optional i32 total_workers;
  5: optional double memory_usage;
  6: optional double cpu_usage;
  7: optional double memory_guarantee;
  8: optional double cpu_guarantee;
  9: optional double memory_guarantee_remaining;
 10: optional double cpu_guarantee_remaining;
 11: optional i32 isolated_node_guarantee;
 12: optional i32 total_tasks;
 13: optional double requested_on_heap_memory;
 14: optional double requested_off_heap_memory;
 15: optional double requested_total_memory;
 16: optional double requested_cpu;
 17: optional double assigned_on_heap_memory;
 18: optional double assigned_off_heap_memory;
}

// --- Storm's supervisors and workers (their own daemons: none on Spark) ---------------
struct WorkerResources {
  1: optional double mem_on_heap;
  2: optional double mem_off_heap;
  3: optional double cpu;
  4: optional double shared_mem_on_heap;
  5: optional double shared_mem_off_heap;
  6: optional map<string, double> resources;
  7: optional map<string, double> shared_resources;
}

struct Assignment {
  1: required string master_code_dir;
  2: optional map<string, string> node_host = {};
  3: optional map<list<i64>, NodeInfo> executor_node_port = {};
  4: optional map<list<i64>, i64> executor_start_time_secs = {};
  5: optional map<NodeInfo, WorkerResources> worker_resources = {};
  6: optional map<string, double> total_shared_off_heap = {};
  7: optional string owner;
}

struct SupervisorAssignments {
  1: optional map<string, Assignment> storm_assignment = {};
}

struct SupervisorWorkerHeartbeat {
  1: required string storm_id;
  2: required list<ExecutorInfo> executors;
  3: required i32 time_secs;          // i32 up to Storm 2.8 (its later 3.0 line: i64)
}

struct SupervisorWorkerHeartbeats {
  1: required string supervisor_id;
  2: required list<SupervisorWorkerHeartbeat> worker_heartbeats;
}

struct WorkerMetricPoint {
  1: required string metricName;
  2: required i64 timestamp;
  3: required double metricValue;
  4: required string componentId;
  5: required string executorId;
  6: required string streamId;
}

struct WorkerMetricList {
  1: list<WorkerMetricPoint> metrics;
}

struct WorkerMetrics {
  1: required string topologyId;
  2: required i32 port;
  3: required string hostname;
  4: required WorkerMetricList metricList;
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

  // Log levels of named loggers (ROOT and dotted Python logger names) in a running
  // topology, by topology id. Storm declares no exceptions here: errors are
  // TApplicationExceptions.
  void setLogConfig(1: string name, 2: LogConfig config);
  LogConfig getLogConfig(1: string name);

  // Log a sample of a component's tuples (all components when component is empty)
  // to the topology's log; name is the topology's id.
  void debug(1: string name, 2: string component, 3: bool enable,
             4: double samplingPercentage)
    throws (1: NotAliveException e, 2: AuthorizationException aze);

  // JVM profiling: not supported on Spark.
  void setWorkerProfiler(1: string id, 2: ProfileRequest profileRequest);
  list<ProfileRequest> getComponentPendingProfileActions(1: string id, 2: string component_id,
                                                        3: ProfileAction action);

  void uploadNewCredentials(1: string name, 2: Credentials creds)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);

  // The blob store. An upload session: begin*Blob, uploadBlobChunk..., then
  // finishBlobUpload (or cancelBlobUpload); a download: beginBlobDownload, then
  // downloadBlobChunk until it returns an empty chunk.
  string beginCreateBlob(1: string key, 2: SettableBlobMeta meta)
    throws (1: AuthorizationException aze, 2: KeyAlreadyExistsException kae);
  string beginUpdateBlob(1: string key)
    throws (1: AuthorizationException aze, 2: KeyNotFoundException knf);
  void uploadBlobChunk(1: string session, 2: binary chunk) throws (1: AuthorizationException aze);
  void finishBlobUpload(1: string session) throws (1: AuthorizationException aze);
  void cancelBlobUpload(1: string session) throws (1: AuthorizationException aze);
  ReadableBlobMeta getBlobMeta(1: string key)
    throws (1: AuthorizationException aze, 2: KeyNotFoundException knf);
  void setBlobMeta(1: string key, 2: SettableBlobMeta meta)
    throws (1: AuthorizationException aze, 2: KeyNotFoundException knf);
  BeginDownloadResult beginBlobDownload(1: string key)
    throws (1: AuthorizationException aze, 2: KeyNotFoundException knf);
  binary downloadBlobChunk(1: string session) throws (1: AuthorizationException aze);
  void deleteBlob(1: string key)
    throws (1: AuthorizationException aze, 2: KeyNotFoundException knf,
            3: IllegalStateException ise);
  // session "" starts a listing; the result's session continues it.
  ListBlobsResult listBlobs(1: string session);
  i32 getBlobReplication(1: string key)
    throws (1: AuthorizationException aze, 2: KeyNotFoundException knf);
  i32 updateBlobReplication(1: string key, 2: i32 replication)
    throws (1: AuthorizationException aze, 2: KeyNotFoundException knf);
  // ZooKeeper bookkeeping of Storm's blob store: nothing to do here.
  void createStateInZookeeper(1: string key);

  // Code transfer. An upload expires after nimbus.file.copy.expiration.secs without
  // a chunk; its total size is capped (nimbus-thrift.upload.max.bytes).
  string beginFileUpload() throws (1: AuthorizationException aze);
  void uploadChunk(1: string location, 2: binary chunk) throws (1: AuthorizationException aze);
  void finishFileUpload(1: string location) throws (1: AuthorizationException aze);
  // Storm 1.x only (2.x removed it). file: a topology id, or a location returned by
  // beginFileUpload. Returns a session id.
  string beginFileDownload(1: string file) throws (1: AuthorizationException aze);
  // An empty chunk means the end of the file.
  binary downloadChunk(1: string id) throws (1: AuthorizationException aze);

  string getNimbusConf() throws (1: AuthorizationException aze);   // a JSON object
  ClusterSummary getClusterInfo() throws (1: AuthorizationException aze);
  list<TopologySummary> getTopologySummaries() throws (1: AuthorizationException aze);
  TopologySummary getTopologySummaryByName(1: string name)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  TopologySummary getTopologySummary(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  // Added in Storm 1.1; streamparse asks isTopologyNameAllowed before submitting.
  NimbusSummary getLeader() throws (1: AuthorizationException aze);
  bool isTopologyNameAllowed(1: string name) throws (1: AuthorizationException aze);
  TopologyInfo getTopologyInfoByName(1: string name)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  TopologyInfo getTopologyInfo(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  TopologyInfo getTopologyInfoByNameWithOpts(1: string name, 2: GetInfoOptions options)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  TopologyInfo getTopologyInfoWithOpts(1: string id, 2: GetInfoOptions options)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  TopologyPageInfo getTopologyPageInfo(1: string id, 2: string window, 3: bool is_include_sys)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  // id: a supervisor id (a Spark worker), host: or its host name.
  SupervisorPageInfo getSupervisorPageInfo(1: string id, 2: string host, 3: bool is_include_sys)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  ComponentPageInfo getComponentPageInfo(1: string topology_id, 2: string component_id,
                                         3: string window, 4: bool is_include_sys)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  string getTopologyConf(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  // Storm adds its system components here; there are none on Spark, so getTopology
  // and getUserTopology return the same.
  StormTopology getTopology(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  StormTopology getUserTopology(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  // Ids of the stored topologies user may see (removed ones are not kept).
  TopologyHistoryInfo getTopologyHistory(1: string user) throws (1: AuthorizationException aze);
  // Requested resources per owner; owner "" means every owner.
  list<OwnerResourceSummary> getOwnerResourceSummaries(1: string owner)
    throws (1: AuthorizationException aze);

  // Storm's supervisors and workers call these; there are none on Spark.
  SupervisorAssignments getSupervisorAssignments(1: string node)
    throws (1: AuthorizationException aze);
  void sendSupervisorWorkerHeartbeats(1: SupervisorWorkerHeartbeats heartbeats)
    throws (1: AuthorizationException aze);
  void sendSupervisorWorkerHeartbeat(1: SupervisorWorkerHeartbeat heatbeat)
    throws (1: AuthorizationException aze, 2: NotAliveException e);
  void processWorkerMetrics(1: WorkerMetrics metrics);
  // Whether a blob with this key exists.
  bool isRemoteBlobExists(1: string blobKey) throws (1: AuthorizationException aze);
}
