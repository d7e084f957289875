// Interface: the base of the executor's injected policies (PipelineStage, GradientSync). They are
// used through references and owned through pointers, so they are neither copied nor moved, and
// destroyed through the base. Thread-safety: nothing of its own.
#pragma once

namespace strait::sched {

class Interface {
 public:
  Interface(const Interface&) = delete;
  Interface& operator=(const Interface&) = delete;
  Interface(Interface&&) = delete;
  Interface& operator=(Interface&&) = delete;
  virtual ~Interface() = default;

 protected:
  Interface() = default;
};

}  // namespace strait::sched
