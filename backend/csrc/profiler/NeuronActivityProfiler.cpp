// Kineto plugin: turns the simulated activity log into device rows of torch.profiler
// traces (pid = device, tid = stream), linked to the CPU ops that launched them.
#ifdef USE_KINETO

#include "runtime/NeuronQueue.h"

#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <c10/util/ApproximateClock.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <set>
#include <unistd.h>
#include <string>

namespace neuron {

namespace {

class NeuronProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    start_ns_ = c10::getTime();
    set_activity_logging(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    activities_ = take_activities();
    lane_names_ = lane_names();
    set_activity_logging(false);
    end_ns_ = c10::getTime();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback get_linked, int64_t, int64_t) override {
    trace_.span = libkineto::TraceSpan(start_ns_, end_ns_, "neuron");
    for (const Activity& a : activities_) {
      trace_.emplace_activity(trace_.span, libkineto::ActivityType::CONCURRENT_KERNEL,
                              op_name(a.name_id));
      libkineto::GenericTraceActivity& activity = *trace_.activities.back();
      activity.startTime = a.trace_start_ns;
      activity.endTime = a.trace_start_ns + (a.sim_end_ns - a.sim_start_ns);
      activity.device = a.device;
      activity.resource = static_cast<int32_t>(a.stream);
      activity.id = static_cast<int32_t>(a.seq);
      activity.flow.id = a.correlation_id;
      activity.flow.type = libkineto::kLinkAsyncCpuGpu;
      activity.flow.start = false;
      if (get_linked && a.correlation_id != 0) {
        activity.linked = get_linked(static_cast<int32_t>(a.correlation_id));
      }
      // The duration is the simulated time (kineto writes it to the nanosecond).
      activity.addMetadataQuoted("device_type", "neuron");
      emit_launch(a, activity.linked, logger);
      logger.handleActivity(activity);
      emit_lanes(a, activity.startTime, logger);
    }
  }

  // The host side of a launch: a runtime row on the issuing thread, inside the CPU op, where
  // the flow to the device row starts (trace viewers draw an arrow only between a start and
  // an end event; kineto writes the start only for an activity flagged as flow start).
  void emit_launch(const Activity& a, const libkineto::ITraceActivity* cpu_op,
                   libkineto::ActivityLogger& logger) {
    if (a.correlation_id == 0 || a.host_wall_ns == 0) return;
    trace_.emplace_activity(trace_.span, libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                            "neuron::launch");
    libkineto::GenericTraceActivity& launch = *trace_.activities.back();
    launch.startTime = a.host_wall_ns;
    launch.endTime = a.host_wall_ns + 1;
    launch.device = static_cast<int32_t>(::getpid());
    launch.resource = a.host_tid;
    launch.id = static_cast<int32_t>(a.seq);
    launch.flow.id = a.correlation_id;
    launch.flow.type = libkineto::kLinkAsyncCpuGpu;
    launch.flow.start = true;
    launch.linked = cpu_op;
    logger.handleActivity(launch);
  }

  // Engine lanes of one op: their own rows (tid = kLaneTidBase + lane) under the device.
  void emit_lanes(const Activity& a, int64_t op_start, libkineto::ActivityLogger& logger) {
    for (const LaneSpan& lane : a.lanes) {
      // Annotation rows: shown on the device timeline, not added to key_averages device time.
      trace_.emplace_activity(trace_.span, libkineto::ActivityType::GPU_USER_ANNOTATION,
                              lane.label);
      libkineto::GenericTraceActivity& row = *trace_.activities.back();
      row.startTime = op_start + lane.offset_ns;
      row.endTime = row.startTime + lane.duration_ns;
      row.device = a.device;
      row.resource = kLaneTidBase + lane.lane_id;
      // Lanes are the bulk of a trace: only what identifies them ("lane" marks a lane row),
      // no id (an unlinked row's id would be written as a made-up "External id").
      row.id = 0;
      row.addMetadataQuoted("op", op_name(a.name_id));
      row.addMetadataQuoted("lane", lane_names_.size() > static_cast<size_t>(lane.lane_id)
                                        ? lane_names_[lane.lane_id] : "");
      logger.handleActivity(row);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(0, 0, "neuron", "Neuron (simulated)");
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    std::set<std::pair<int32_t, int32_t>> seen;  // (device, lane)
    for (const Activity& a : activities_) {
      for (const LaneSpan& lane : a.lanes) {
        if (!seen.insert({a.device, lane.lane_id}).second) continue;
        const int64_t tid = kLaneTidBase + lane.lane_id;
        infos.push_back(libkineto::ResourceInfo{tid, tid, a.device, lane_names_.at(lane.lane_id)});
      }
    }
    return infos;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::make_unique<libkineto::CpuTraceBuffer>(std::move(trace_));
  }

  void pushCorrelationId(uint64_t id) override { push_correlation_id(id); }
  void popCorrelationId() override { pop_correlation_id(); }

 private:
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  static constexpr int32_t kLaneTidBase = 1000;  // op rows use the stream id as tid
  std::vector<Activity> activities_;
  std::vector<std::string> lane_names_;
  libkineto::CpuTraceBuffer trace_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>&, const libkineto::Config&) override {
    return std::make_unique<NeuronProfilerSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<libkineto::ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "neuron";
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::CONCURRENT_KERNEL,
                                                libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

}  // namespace neuron

#endif  // USE_KINETO
