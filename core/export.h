/// \file
/// STRAIT_API: what libstrait.so exports. The library is compiled with -fvisibility=hidden and
/// -fvisibility-inlines-hidden, so a program linking it sees only declarations marked STRAIT_API:
/// on a class, its out-of-line members, vtable and typeinfo (needed to catch strait::Error or
/// derive from strait::comm::Store); on a function, the function. Everything else stays internal
/// and may change between releases. Plain C (the C API's header includes it) and C++.
///
/// Mark every class with out-of-line members or virtual functions, and every non-inline function,
/// declared in a header that cmake/Package.cmake installs; tests/install/exported_symbols.py checks
/// that nothing else leaks.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define STRAIT_API __attribute__((visibility("default")))
#else
#define STRAIT_API
#endif
