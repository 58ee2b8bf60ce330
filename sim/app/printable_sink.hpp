// Every log line printable (issue 22): a spdlog sink that passes each message through
// printable() (core/printable.hpp) before the sink it wraps formats and writes it. Info and
// warning lines quote file names and values from outside (output names, sweep directories,
// checkpoint paths); escaping them here, once, covers every such line, present and future.
// Idempotent on text already escaped (error lines escape what they quote).
#pragma once

#include <spdlog/sinks/sink.h>

#include <cstddef>
#include <memory>
#include <string>

namespace rcsim {

// Longest message kept whole (longer ones are cut, saying how long they were).
constexpr std::size_t kLogLineLimit = 4096;

class PrintableSink final : public spdlog::sinks::sink {
 public:
  explicit PrintableSink(spdlog::sink_ptr inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override;
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  spdlog::sink_ptr inner_;
};

}  // namespace rcsim
