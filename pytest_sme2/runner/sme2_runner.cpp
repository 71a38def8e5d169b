// sme2_runner: runs one method of an ExecuTorch program N times and reports what a profiler needs.
//
// Why not ExecuTorch's executor_runner: it feeds all-ones inputs, cannot return outputs, and always
// attaches the event tracer when built with devtools. This runner keeps executor_runner's flags
// (--model_path, --num_executions, --cpu_threads, --etdump_path) and its success line, and adds
//   --warmup N    executions before the measured ones (traced too, so a trace holds W+N runs)
//   --inputs F    real inputs, as a tensor file (format in pytest_sme2/runner/tensors.py)
//   --outputs F   the outputs of the last execution, as a tensor file
//   --timings F   JSON: per-execution wall-clock latencies (steady clock around Method::execute),
//                 each execution's thread CPU time and involuntary context switches (whether a
//                 busy machine took the CPU away mid-execution), program load and method init
//                 times (init is where XNNPACK packs the weights), the planned memory and the
//                 process's own peak resident memory (VmHWM; task_info on macOS), and what the
//                 process saw of the CPU (SME, SME2, streaming vector length, XNNPACK's SME2
//                 kernels): what proves a run's sme2-on/off label
//   --method M    the method to run (default: forward)
//   --kernel_library L  a shared library loaded (dlopen, RTLD_GLOBAL) before anything else, whose
//                 static initialisers register more kernels with the runtime: ExecuTorch's LLM
//                 custom ops (llama::custom_sdpa, llama::update_cache) are only shipped that way.
//                 Repeatable; the time it took is the timings' kernel_libraries_ms. Each kernel
//                 such a library registers is an ETDump event of its own, named as ExecuTorch
//                 names its generated kernels' (native_call_custom_sdpa.out)
// Without --etdump_path no event tracer is attached at all, so timing-only latencies carry no
// tracing overhead.
//
// Every execution is the same inference. A program may write over its own inputs while it runs
// (the memory plan reuses an input's planned bytes after its last use) and a decode step mutates
// its KV-cache buffers, so running `execute()` N times on inputs set once measures N different
// inferences, and token ids overwritten with booleans crash an embedding. Before each execution,
// outside the timed `Method::execute`, the runner therefore restores the planned memory to its
// state right after `load_method` (mutable buffers at their initial values) and sets every input
// again from an untouched copy. Every failure prints one `error:` line naming what failed (with the
// ExecuTorch error name and code) and exits non-zero; nothing here aborts on a bad file.

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/core/event_tracer_hooks.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#ifdef __APPLE__
#include <mach/mach.h>
#define PEAK_RSS_SOURCE "task_info"
#else
#define PEAK_RSS_SOURCE "VmHWM"
#endif

// libexecutorch_threadpool.so exports these but the wheel ships no threadpool.h. Only member
// functions are declared (no data members): the object is only ever used through the pointer the
// library returns, so its layout does not matter here.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

#ifndef SME2_EXECUTORCH_VERSION
#define SME2_EXECUTORCH_VERSION ""
#endif

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Result;
using executorch::runtime::Span;
using executorch::runtime::Tag;

constexpr int kExitFailure = 1;  // the model or a file could not be loaded, run or written
constexpr int kExitUsage = 2;    // bad command line
constexpr char kTensorMagic[8] = {'S', 'M', 'E', '2', 'T', 'N', 'S', '1'};

// Thrown for every reportable failure; main() prints it as one line and exits with `code`.
struct Failure {
  std::string message;
  int code = kExitFailure;
};

[[noreturn]] void fail(const std::string& message, int code = kExitFailure) {
  throw Failure{message, code};
}

std::string describe(Error error) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s (0x%02x)", executorch::runtime::to_string(error),
                static_cast<unsigned>(error));
  return buf;
}

template <typename T>
T unwrap(Result<T>&& result, const std::string& what) {
  if (!result.ok()) {
    fail(what + " failed: " + describe(result.error()));
  }
  return std::move(result.get());
}

struct Options {
  std::string model_path;
  std::string method = "forward";
  long num_executions = 1;
  long warmup = 0;
  long cpu_threads = -1;  // -1: keep the thread pool's default size
  std::string etdump_path;
  std::string inputs_path;
  std::string outputs_path;
  std::string timings_path;
  std::vector<std::string> kernel_libraries;
};

long parse_count(const std::string& flag, const std::string& text, long minimum) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < minimum) {
    fail("--" + flag + " expects an integer >= " + std::to_string(minimum) + ", got '" + text +
             "'",
         kExitUsage);
  }
  return value;
}

// Accepts `--flag value` and `--flag=value`, like the gflags-based executor_runner.
Options parse_args(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      fail("unexpected argument '" + arg + "' (flags look like --name value)", kExitUsage);
    }
    arg = arg.substr(2);
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      fail("--" + arg + " needs a value", kExitUsage);
    }
    if (arg == "model_path") {
      options.model_path = value;
    } else if (arg == "method") {
      options.method = value;
    } else if (arg == "num_executions") {
      options.num_executions = parse_count(arg, value, 1);
    } else if (arg == "warmup") {
      options.warmup = parse_count(arg, value, 0);
    } else if (arg == "cpu_threads") {
      options.cpu_threads = parse_count(arg, value, -1);
      if (options.cpu_threads == 0) {
        fail("--cpu_threads expects a positive count or -1 (default), got 0", kExitUsage);
      }
    } else if (arg == "etdump_path") {
      options.etdump_path = value;
    } else if (arg == "inputs") {
      options.inputs_path = value;
    } else if (arg == "outputs") {
      options.outputs_path = value;
    } else if (arg == "timings") {
      options.timings_path = value;
    } else if (arg == "kernel_library") {
      options.kernel_libraries.push_back(value);
    } else {
      fail("unknown flag --" + arg, kExitUsage);
    }
  }
  if (options.model_path.empty()) {
    fail("--model_path is required", kExitUsage);
  }
  return options;
}

// Writes via a temporary sibling + rename, so a reader never sees a half-written file.
void write_atomic(const std::string& path, const void* data, size_t size) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) {
    fail("cannot write " + path + ": " + std::strerror(errno));
  }
  const bool written = size == 0 || std::fwrite(data, 1, size, file) == size;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    fail("cannot write " + path + ": " + reason);
  }
}

// The whole file in one read. Not std::istreambuf_iterator: that copies byte by byte, which under
// qemu-sme2 was the runner's costliest code outside any counted call — 9.6 M of the 63.8 M
// instructions a counted run of mobilenet_v3_small int8 executed (a 602 KB inputs file), every one
// of them a block logged and parsed for nothing (docs/costs.md).
std::vector<uint8_t> read_file(const std::string& path, const std::string& role) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    fail("cannot open " + role + " " + path + ": " + std::strerror(errno));
  }
  const std::streamoff size = in.tellg();
  std::vector<uint8_t> bytes(size > 0 ? static_cast<size_t>(size) : 0);
  in.seekg(0);
  if (size < 0 || !in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    fail("cannot read " + role + " " + path + ": " + std::strerror(errno));
  }
  return bytes;
}

// ---- tensor file ------------------------------------------------------------------------------
// magic "SME2TNS1", u32 count, then per tensor: u32 ScalarType code, u32 ndim, i64 dims[ndim],
// u64 nbytes, nbytes of contiguous little-endian data. This file only runs on little-endian hosts
// (x86-64, aarch64), so values are copied as they are.

struct HostTensor {
  ScalarType dtype;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

bool supported_dtype(uint32_t code) {
  switch (static_cast<ScalarType>(code)) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Short:
    case ScalarType::Int:
    case ScalarType::Long:
    case ScalarType::Half:
    case ScalarType::Float:
    case ScalarType::Double:
    case ScalarType::Bool:
    case ScalarType::BFloat16:
      return true;
    default:
      return false;
  }
}

class Reader {
 public:
  Reader(const std::vector<uint8_t>& bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  template <typename T>
  T take(const char* what) {
    T value;
    std::memcpy(&value, need(sizeof(T), what), sizeof(T));
    return value;
  }

  const uint8_t* need(uint64_t size, const char* what) {
    if (size > bytes_.size() - offset_) {
      fail("tensor file " + path_ + " is truncated: " + what + " needs " + std::to_string(size) +
           " bytes at offset " + std::to_string(offset_) + ", file has " +
           std::to_string(bytes_.size()));
    }
    const uint8_t* at = bytes_.data() + offset_;
    offset_ += size;
    return at;
  }

  bool at_end() const { return offset_ == bytes_.size(); }

 private:
  const std::vector<uint8_t>& bytes_;
  const std::string& path_;
  size_t offset_ = 0;
};

std::vector<HostTensor> read_tensor_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path, "inputs file");
  Reader reader(bytes, path);
  if (std::memcmp(reader.need(sizeof(kTensorMagic), "the magic"), kTensorMagic,
                  sizeof(kTensorMagic)) != 0) {
    fail("inputs file " + path + " is not a tensor file (no SME2TNS1 magic)");
  }
  const uint32_t count = reader.take<uint32_t>("the tensor count");
  std::vector<HostTensor> tensors;
  for (uint32_t i = 0; i < count; ++i) {
    const std::string which = "tensor " + std::to_string(i);
    const uint32_t code = reader.take<uint32_t>("a dtype");
    if (!supported_dtype(code)) {
      fail("tensor file " + path + ": " + which + " has unsupported dtype code " +
           std::to_string(code));
    }
    HostTensor tensor{static_cast<ScalarType>(code), {}, {}};
    const uint32_t ndim = reader.take<uint32_t>("a rank");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      const int64_t dim = reader.take<int64_t>("a dimension");
      if (dim < 0 || dim > INT32_MAX) {
        fail("tensor file " + path + ": " + which + " has an invalid dimension " +
             std::to_string(dim));
      }
      tensor.dims.push_back(dim);
      numel *= static_cast<uint64_t>(dim);
    }
    const uint64_t nbytes = reader.take<uint64_t>("a byte count");
    if (nbytes != numel * executorch::runtime::elementSize(tensor.dtype)) {
      fail("tensor file " + path + ": " + which + " declares " + std::to_string(nbytes) +
           " bytes for " + std::to_string(numel) + " elements of " +
           executorch::runtime::toString(tensor.dtype));
    }
    const uint8_t* data = reader.need(nbytes, "tensor data");
    tensor.data.assign(data, data + nbytes);
    tensors.push_back(std::move(tensor));
  }
  if (!reader.at_end()) {
    fail("tensor file " + path + " has trailing bytes after " + std::to_string(count) +
         " tensors");
  }
  return tensors;
}

template <typename T>
void append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Appends `tensor` to `out` in logical (row-major contiguous) order, whatever its strides: a
// program may hand back an output in another dim order, and the file format promises contiguous.
void append_tensor(std::string& out, const Tensor& tensor) {
  append(out, static_cast<uint32_t>(tensor.scalar_type()));
  append(out, static_cast<uint32_t>(tensor.dim()));
  for (ssize_t d = 0; d < tensor.dim(); ++d) {
    append(out, static_cast<int64_t>(tensor.size(d)));
  }
  const size_t element = tensor.element_size();
  const size_t numel = static_cast<size_t>(tensor.numel());
  append(out, static_cast<uint64_t>(numel * element));
  const char* base = static_cast<const char*>(tensor.const_data_ptr());
  std::vector<int64_t> index(tensor.dim(), 0);
  for (size_t n = 0; n < numel; ++n) {
    int64_t offset = 0;
    for (ssize_t d = 0; d < tensor.dim(); ++d) {
      offset += index[d] * tensor.strides()[d];
    }
    out.append(base + offset * element, element);
    for (ssize_t d = tensor.dim() - 1; d >= 0; --d) {  // odometer increment, last dim fastest
      if (++index[d] < tensor.size(d)) {
        break;
      }
      index[d] = 0;
    }
  }
}

// Scalars a method may return are written as 0-d tensors, so the file stays one list of tensors.
template <typename T>
void append_scalar(std::string& out, ScalarType dtype, T value) {
  append(out, static_cast<uint32_t>(dtype));
  append(out, static_cast<uint32_t>(0));
  append(out, static_cast<uint64_t>(sizeof(T)));
  append(out, value);
}

void write_outputs(const std::string& path, const Method& method) {
  std::string out(kTensorMagic, sizeof(kTensorMagic));
  append(out, static_cast<uint32_t>(method.outputs_size()));
  for (size_t i = 0; i < method.outputs_size(); ++i) {
    const EValue& value = method.get_output(i);
    if (value.isTensor()) {
      append_tensor(out, value.toTensor());
    } else if (value.isInt()) {
      append_scalar(out, ScalarType::Long, value.toInt());
    } else if (value.isDouble()) {
      append_scalar(out, ScalarType::Double, value.toDouble());
    } else if (value.isBool()) {
      append_scalar(out, ScalarType::Bool, static_cast<uint8_t>(value.toBool()));
    } else {
      fail("output " + std::to_string(i) + " has EValue tag " +
           std::to_string(static_cast<unsigned>(value.tag)) +
           ", which cannot be written to a tensor file");
    }
  }
  write_atomic(path, out.data(), out.size());
}

// ---- inputs -----------------------------------------------------------------------------------

std::string shape_string(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    text += (d ? ", " : "") + std::to_string(dims[d]);
  }
  return text + "]";
}

// Owns a tensor's data and the metadata arrays a TensorImpl points at, for the whole run. `host`
// is never handed to the program: `working` is, refilled from `host` before every execution, since
// a non-memory-planned input keeps pointing at the data it was given and the program may write
// there.
struct BoundInput {
  HostTensor host;
  std::vector<uint8_t> working;
  std::vector<TensorImpl::SizesType> sizes;
  std::vector<TensorImpl::DimOrderType> dim_order;
  std::vector<TensorImpl::StridesType> strides;
  std::unique_ptr<TensorImpl> impl;
  std::vector<int64_t> expected;  // the program's planned shape, for error messages
};

std::vector<std::unique_ptr<BoundInput>> bind_inputs(const MethodMeta& meta,
                                                     const Options& options,
                                                     std::vector<HostTensor> tensors) {
  std::vector<std::unique_ptr<BoundInput>> bound;
  if (meta.num_inputs() == 0) {
    return bound;
  }
  if (options.inputs_path.empty()) {
    fail("--inputs is required: method '" + options.method + "' takes " +
             std::to_string(meta.num_inputs()) + " input(s)",
         kExitUsage);
  }
  if (tensors.size() != meta.num_inputs()) {
    fail("inputs file " + options.inputs_path + " holds " + std::to_string(tensors.size()) +
         " tensor(s) but method '" + options.method + "' takes " +
         std::to_string(meta.num_inputs()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string which = "input " + std::to_string(i);
    const Tag tag = unwrap(meta.input_tag(i), "reading the tag of " + which);
    if (tag != Tag::Tensor) {
      fail(which + " of method '" + options.method + "' is not a tensor (EValue tag " +
           std::to_string(static_cast<unsigned>(tag)) + "); only tensor inputs are supported");
    }
    const auto info = unwrap(meta.input_tensor_meta(i), "reading the metadata of " + which);
    std::vector<int64_t> expected(info.sizes().begin(), info.sizes().end());
    auto input = std::make_unique<BoundInput>();
    input->host = std::move(tensors[i]);
    const HostTensor& host = input->host;
    if (host.dtype != info.scalar_type()) {
      fail(which + " in " + options.inputs_path + " is " +
           executorch::runtime::toString(host.dtype) + " but the program expects " +
           executorch::runtime::toString(info.scalar_type()));
    }
    // A different shape is allowed only within the planned size (dynamic shapes); set_input
    // then decides whether the program accepts it.
    if (host.dims != expected && host.data.size() > info.nbytes()) {
      fail(which + " in " + options.inputs_path + " has shape " + shape_string(host.dims) +
           " but the program expects " + shape_string(expected));
    }
    const size_t ndim = host.dims.size();
    input->sizes.assign(host.dims.begin(), host.dims.end());
    input->strides.assign(ndim, 1);
    for (size_t d = 0; d < ndim; ++d) {
      input->dim_order.push_back(static_cast<TensorImpl::DimOrderType>(d));
    }
    for (size_t d = ndim; d-- > 1;) {
      input->strides[d - 1] = input->strides[d] * input->sizes[d];
    }
    input->working = host.data;
    input->impl = std::make_unique<TensorImpl>(host.dtype, static_cast<ssize_t>(ndim),
                                               input->sizes.data(), input->working.data(),
                                               input->dim_order.data(), input->strides.data());
    input->expected = std::move(expected);
    bound.push_back(std::move(input));
  }
  return bound;
}

// Sets every input from its untouched copy (see the file comment: the program may have written
// over the previous execution's).
void set_inputs(Method& method, const std::vector<std::unique_ptr<BoundInput>>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    BoundInput& input = *inputs[i];
    std::memcpy(input.working.data(), input.host.data.data(), input.host.data.size());
    const Error error = method.set_input(EValue(Tensor(input.impl.get())), i);
    if (error != Error::Ok) {
      fail("set_input(" + std::to_string(i) + ") with shape " + shape_string(input.host.dims) +
           " (program expects " + shape_string(input.expected) + ") failed: " + describe(error));
    }
  }
}

// The planned memory as `load_method` left it: mutable buffers (a KV cache) hold their initial
// state from the program, the rest is scratch. Restoring it before each execution makes a
// stateful method run the same step every time; for a stateless one it is a copy outside the
// timed region, cheaper than an inference (the arena is what one inference touches).
class PlannedState {
 public:
  explicit PlannedState(const std::vector<std::vector<uint8_t>>& buffers) : initial_(buffers) {}

  void restore(std::vector<std::vector<uint8_t>>& buffers) const {
    for (size_t i = 0; i < buffers.size(); ++i) {
      std::memcpy(buffers[i].data(), initial_[i].data(), buffers[i].size());
    }
  }

 private:
  const std::vector<std::vector<uint8_t>> initial_;
};

// ---- timings ----------------------------------------------------------------------------------

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f", value);
  return buf;
}

// What loading cost and what the process held: program load (read and verify the .pte) and
// method init (memory plan, delegate init: XNNPACK and KleidiAI pack the weights here) apart, as
// SME2 on and off pack differently.
struct LoadStats {
  double program_load_ms = 0;
  double method_init_ms = 0;
  uint64_t planned_bytes = 0;  // the memory plan's arenas (activations, inputs, mutable buffers)
  double kernel_libraries_ms = 0;  // loading --kernel_library libraries (0 without any)
};

// This program's own peak resident memory so far, in bytes; 0 where the platform cannot tell.
// Not getrusage's ru_maxrss: Linux carries it across execve, and a process started by vfork or
// posix_spawn (as the session starts every runner) inherits its parent's high-water mark, so a
// runner started from a 580 MiB pytest session reported 580 MiB for a model that needs 11.
// VmHWM belongs to the address space, which execve replaces; macOS's task_info counts the task's
// own pages likewise.
uint64_t peak_rss_bytes() {
#ifdef __APPLE__
  task_vm_info_data_t info{};
  mach_msg_type_number_t count = TASK_VM_INFO_COUNT;
  if (task_info(mach_task_self(), TASK_VM_INFO, reinterpret_cast<task_info_t>(&info), &count) !=
      KERN_SUCCESS) {
    return 0;
  }
  return static_cast<uint64_t>(info.resident_size_peak);
#else
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %llu kB", &kib) == 1) {
      return static_cast<uint64_t>(kib) * 1024;
    }
  }
  return 0;
#endif
}

// What this process saw of the CPU's matrix extensions, asked the way XNNPACK's and KleidiAI's
// own dispatch asks (through the same getauxval or sysctlbyname a shim may answer): a run labelled
// sme2-on must see SME2, one labelled sme2-off must see neither SME nor SME2 (an "off" that hides
// SME2 but not SME still runs SME1 kernels on an M4). Only arm64 has them: elsewhere both are
// false by the architecture. The streaming vector length where SME is visible (Linux's prctl).
struct CpuSeen {
  const char* source;
  bool sme;
  bool sme2;
  long svl_bytes;  // -1: not known
};

CpuSeen cpu_seen() {
#if defined(__aarch64__) && defined(__linux__)
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  CpuSeen seen{"getauxval(AT_HWCAP2)", (hwcap2 & (1UL << 23)) != 0,  // HWCAP2_SME
               (hwcap2 & (1UL << 37)) != 0, -1};                    // HWCAP2_SME2
  if (seen.sme) {
    const int vl = prctl(64 /* PR_SME_GET_VL */, 0, 0, 0, 0);
    if (vl >= 0) {
      seen.svl_bytes = vl & 0xffff;  // PR_SME_VL_LEN_MASK
    }
  }
  return seen;
#elif defined(__APPLE__) && defined(__aarch64__)
  auto feature = [](const char* name) {
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname(name, &value, &size, nullptr, 0) == 0 && value == 1;
  };
  return {"sysctl hw.optional.arm", feature("hw.optional.arm.FEAT_SME"),
          feature("hw.optional.arm.FEAT_SME2"), -1};
#else
  return {"not an arm64 CPU", false, false, -1};
#endif
}

// Whether the XNNPACK this runner loaded carries SME2 kernels: KleidiAI's fp32 SME2 GEMM is
// exported by the wheels' libexecutorch_backend_xnnpack.so when it was built in (aarch64), and
// absent otherwise (x86-64, or a build without KleidiAI's SME2 kernels). A statically linked
// runner exports nothing: there it reads as absent.
bool xnnpack_has_sme2_kernels() {
  return dlsym(RTLD_DEFAULT,
               "kai_get_dst_offset_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa") !=
         nullptr;
}

void write_timings(const Options& options, size_t threads, const LoadStats& load,
                   const std::vector<double>& latencies_ms, const std::vector<double>& cpu_ms,
                   const std::vector<long>& preemptions) {
  std::ostringstream json;
  json << "{\"warmup\": " << options.warmup << ", \"num_executions\": " << options.num_executions
       << ", \"threads\": " << threads
       << ", \"traced\": " << (options.etdump_path.empty() ? "false" : "true")
       << ", \"method\": " << json_string(options.method) << ", \"latencies_ms\": [";
  for (size_t i = 0; i < latencies_ms.size(); ++i) {
    json << (i ? ", " : "") << json_number(latencies_ms[i]);
  }
  json << "], \"cpu_ms\": [";
  for (size_t i = 0; i < cpu_ms.size(); ++i) {
    json << (i ? ", " : "") << json_number(cpu_ms[i]);
  }
  json << "], \"preemptions\": [";
  for (size_t i = 0; i < preemptions.size(); ++i) {
    json << (i ? ", " : "") << preemptions[i];
  }
  json << "], \"load_ms\": " << json_number(load.program_load_ms + load.method_init_ms)
       << ", \"program_load_ms\": " << json_number(load.program_load_ms)
       << ", \"method_init_ms\": " << json_number(load.method_init_ms)
       << ", \"planned_bytes\": " << load.planned_bytes
       << ", \"kernel_libraries_ms\": " << json_number(load.kernel_libraries_ms)
       << ", \"peak_rss_bytes\": " << peak_rss_bytes()
       << ", \"peak_rss_source\": " << json_string(PEAK_RSS_SOURCE);
  const CpuSeen seen = cpu_seen();
  json << ", \"cpu_seen\": {\"source\": " << json_string(seen.source)
       << ", \"sme\": " << (seen.sme ? "true" : "false")
       << ", \"sme2\": " << (seen.sme2 ? "true" : "false") << ", \"svl_bytes\": ";
  if (seen.svl_bytes >= 0) {
    json << seen.svl_bytes;
  } else {
    json << "null";
  }
  json << ", \"xnnpack_sme2_kernels\": " << (xnnpack_has_sme2_kernels() ? "true" : "false")
       << "}";
  if (std::strlen(SME2_EXECUTORCH_VERSION) > 0) {
    json << ", \"executorch_version\": " << json_string(SME2_EXECUTORCH_VERSION);
  }
  json << "}\n";
  const std::string text = json.str();
  write_atomic(options.timings_path, text.data(), text.size());
}

// What a busy machine did to one execution, read on the executing thread: its CPU time (which
// preemption does not advance) and its involuntary context switches (each one a time slice given
// to another runnable thread). pytest_sme2.run.disturbance judges a timing from these; the wall clock
// stays the latency. macOS has no per-thread rusage: there the process's switches are counted,
// which with one thread is the same.
struct ThreadClock {
  double cpu_ms = 0;
  long preemptions = 0;

  static ThreadClock now() {
    ThreadClock clock;
    struct timespec cpu {};
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0) {
      clock.cpu_ms =
          static_cast<double>(cpu.tv_sec) * 1e3 + static_cast<double>(cpu.tv_nsec) / 1e6;
    }
    struct rusage usage {};
#ifdef RUSAGE_THREAD
    const int who = RUSAGE_THREAD;
#else
    const int who = RUSAGE_SELF;
#endif
    if (getrusage(who, &usage) == 0) {
      clock.preemptions = usage.ru_nivcsw;
    }
    return clock;
  }
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// ---- kernel libraries -------------------------------------------------------------------------
// ExecuTorch's generated kernels record an ETDump event of their own ("native_call_add.out")
// inside the method's OPERATOR_CALL; kernels registered by hand (EXECUTORCH_LIBRARY, as the LLM
// custom ops are) record none, so their time would be an unnamed OPERATOR_CALL that a profile
// folds into Other. This runner therefore defines register_kernels itself (exported, so a
// library's call binds here first): while a --kernel_library loads, each kernel it registers is
// replaced by a trampoline recording that event around the original; every other registration
// goes straight to the runtime's own register_kernels.
namespace kernel_events {

using executorch::runtime::Kernel;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::OpFunction;

constexpr size_t kMaxWrapped = 64;  // the LLM custom ops library registers 10
constexpr size_t kNameBytes = 96;
bool wrapping = false;              // zero-initialised: safe during the libraries' static init
size_t wrapped_count = 0;
OpFunction originals[kMaxWrapped];
char event_names[kMaxWrapped][kNameBytes];

template <size_t I>
void trampoline(KernelRuntimeContext& context, Span<EValue*> arguments) {
  executorch::runtime::internal::EventTracerProfileOpScope scope(context.internal_event_tracer(),
                                                                  event_names[I]);
  originals[I](context, arguments);
}

template <size_t... I>
constexpr std::array<OpFunction, sizeof...(I)> trampolines(std::index_sequence<I...>) {
  return {&trampoline<I>...};
}
constexpr std::array<OpFunction, kMaxWrapped> kTrampolines =
    trampolines(std::make_index_sequence<kMaxWrapped>{});

// "llama::custom_sdpa.out" -> "native_call_custom_sdpa.out", as the generated kernels are named.
Kernel wrapped(const Kernel& kernel) {
  if (wrapped_count == kMaxWrapped) {
    return kernel;  // beyond the table: registered as is, its time stays in its OPERATOR_CALL
  }
  const std::string name = kernel.name_;
  const size_t colons = name.rfind("::");
  const std::string event =
      "native_call_" + (colons == std::string::npos ? name : name.substr(colons + 2));
  const size_t i = wrapped_count++;
  std::snprintf(event_names[i], kNameBytes, "%s", event.c_str());
  originals[i] = kernel.op_;
  Kernel copy = kernel;
  copy.op_ = kTrampolines[i];
  return copy;
}

}  // namespace kernel_events
}  // namespace

namespace executorch::runtime {

// The runtime's register_kernels, wrapping the kernels of a --kernel_library (see above).
Error register_kernels(const Span<const Kernel> kernels) {
  using Register = Error (*)(Span<const Kernel>);
  static const Register runtime_register = reinterpret_cast<Register>(
      dlsym(RTLD_NEXT, "_ZN10executorch7runtime16register_kernelsENS0_4SpanIKNS0_6KernelEEE"));
  if (runtime_register == nullptr) {
    return Error::Internal;
  }
  if (!kernel_events::wrapping) {
    return runtime_register(kernels);
  }
  static std::vector<Kernel>* kept = new std::vector<Kernel>();  // the registry keeps pointers
  kept->reserve(kept->size() + kernels.size());
  const size_t first = kept->size();
  for (const Kernel& kernel : kernels) {
    kept->push_back(kernel_events::wrapped(kernel));
  }
  return runtime_register({kept->data() + first, kernels.size()});
}

}  // namespace executorch::runtime

namespace {

// ---- the run ----------------------------------------------------------------------------------

// Loads each --kernel_library, whose static initialisers register their kernels with the
// runtime's registry (the shared libexecutorch.so this binary links too, so the program sees
// them). First, before any file of the run is opened: qemu-sme2 counts from the inputs file on.
double load_kernel_libraries(const std::vector<std::string>& paths) {
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& path : paths) {
    kernel_events::wrapping = true;
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    kernel_events::wrapping = false;
    if (library == nullptr) {
      const char* why = dlerror();
      fail("cannot load kernel library " + path + ": " + (why != nullptr ? why : "dlopen failed"));
    }
  }
  return paths.empty() ? 0.0 : ms_since(start);
}

int run(const Options& options) {
  executorch::runtime::runtime_init();
  const double kernel_libraries_ms = load_kernel_libraries(options.kernel_libraries);
  namespace threadpool = executorch::extension::threadpool;
  // Before anything is loaded: the XNNPACK delegate takes the pool when the method is initialised.
  if (options.cpu_threads > 0 &&
      !threadpool::get_threadpool()->_unsafe_reset_threadpool(
          static_cast<uint32_t>(options.cpu_threads))) {
    fail("could not resize the thread pool to " + std::to_string(options.cpu_threads) +
         " threads");
  }
  const size_t threads = threadpool::get_threadpool()->get_thread_count();

  // Checked by hand first so that a file that is not a program gets a plain answer rather than
  // whatever the flatbuffer verifier makes of it.
  const std::vector<uint8_t> head = [&] {
    std::ifstream in(options.model_path, std::ios::binary);
    if (!in) {
      fail("cannot open model " + options.model_path + ": " + std::strerror(errno));
    }
    std::vector<uint8_t> bytes(64, 0);
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    bytes.resize(static_cast<size_t>(in.gcount()));
    return bytes;
  }();
  switch (Program::check_header(head.data(), head.size())) {
    case Program::HeaderStatus::CompatibleVersion:
      break;
    case Program::HeaderStatus::IncompatibleVersion:
      fail("model " + options.model_path +
           " is an ExecuTorch program of a version this runtime (" SME2_EXECUTORCH_VERSION
           ") cannot read: re-export it with the same executorch version");
    default:
      fail("model " + options.model_path + " is not an ExecuTorch program (.pte)");
  }

  // Read before loading: the inputs file is the last file the runner opens before its
  // executions, so an instruction counter that stops at the next file opened (qemu-sme2's exec
  // log) sees method init and every execution.
  std::vector<HostTensor> input_tensors;
  if (!options.inputs_path.empty()) {
    input_tensors = read_tensor_file(options.inputs_path);
  }
  LoadStats load;
  load.kernel_libraries_ms = kernel_libraries_ms;
  const auto load_start = std::chrono::steady_clock::now();
  auto loader = unwrap(executorch::extension::MmapDataLoader::from(
                           options.model_path.c_str(),
                           executorch::extension::MmapDataLoader::MlockConfig::NoMlock),
                       "opening model " + options.model_path);
  auto program = unwrap(Program::load(&loader, Program::Verification::InternalConsistency),
                        "Program::load of " + options.model_path);
  const MethodMeta meta =
      unwrap(program.method_meta(options.method.c_str()),
             "finding method '" + options.method + "' in " + options.model_path);

  load.program_load_ms = ms_since(load_start);

  std::vector<std::vector<uint8_t>> planned_buffers;
  std::vector<Span<uint8_t>> planned_spans;
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
    const int64_t size = unwrap(meta.memory_planned_buffer_size(i), "reading planned buffer size");
    planned_buffers.emplace_back(static_cast<size_t>(size));
    planned_spans.emplace_back(planned_buffers.back().data(), planned_buffers.back().size());
    load.planned_bytes += static_cast<uint64_t>(size);
  }
  HierarchicalAllocator planned_memory({planned_spans.data(), planned_spans.size()});
  executorch::extension::MallocMemoryAllocator method_allocator;
  executorch::extension::MallocMemoryAllocator temp_allocator;
  MemoryManager memory_manager(&method_allocator, &planned_memory, &temp_allocator);

  std::unique_ptr<executorch::etdump::ETDumpGen> etdump;
  if (!options.etdump_path.empty()) {
    etdump = std::make_unique<executorch::etdump::ETDumpGen>();
  }
  const auto init_start = std::chrono::steady_clock::now();
  Method method = unwrap(program.load_method(options.method.c_str(), &memory_manager, etdump.get()),
                         "load_method('" + options.method + "')");
  load.method_init_ms = ms_since(init_start);

  const auto bound_inputs = bind_inputs(meta, options, std::move(input_tensors));
  const PlannedState initial_state(planned_buffers);

  const long total = options.warmup + options.num_executions;
  std::vector<double> latencies_ms;
  latencies_ms.reserve(static_cast<size_t>(total));
  std::vector<double> cpu_ms;
  std::vector<long> preemptions;
  for (long i = 0; i < total; ++i) {
    // counted from before the restore: a switch there leaves the execution's caches cold too
    const ThreadClock before = ThreadClock::now();
    initial_state.restore(planned_buffers);
    set_inputs(method, bound_inputs);
    const auto start = std::chrono::steady_clock::now();
    const ThreadClock started = ThreadClock::now();
    const Error error = method.execute();
    latencies_ms.push_back(ms_since(start));
    const ThreadClock after = ThreadClock::now();
    cpu_ms.push_back(after.cpu_ms - started.cpu_ms);
    preemptions.push_back(after.preemptions - before.preemptions);
    if (error != Error::Ok) {
      fail("execution " + std::to_string(i + 1) + " of " + std::to_string(total) +
           " (method '" + options.method + "') failed: " + describe(error));
    }
  }
  double measured_ms = 0;
  for (long i = options.warmup; i < total; ++i) {
    measured_ms += latencies_ms[static_cast<size_t>(i)];
  }
  std::printf("Model executed successfully %ld time(s) in %f ms.\n", options.num_executions,
              measured_ms);

  if (!options.outputs_path.empty()) {
    write_outputs(options.outputs_path, method);
  }
  if (etdump) {
    const executorch::etdump::ETDumpResult result = etdump->get_etdump_data();
    if (result.buf == nullptr || result.size == 0) {
      fail("the event tracer produced no ETDump data");
    }
    std::unique_ptr<void, decltype(&std::free)> owned(result.buf, &std::free);
    write_atomic(options.etdump_path, result.buf, result.size);
  }
  if (!options.timings_path.empty()) {
    write_timings(options, threads, load, latencies_ms, cpu_ms, preemptions);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const Failure& failure) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", failure.message.c_str());
    return failure.code;
  } catch (const std::exception& exception) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", exception.what());
    return kExitFailure;
  }
}
