// The program that compiles the tests' shared precompiled header (tests/CMakeLists.txt,
// TAPEGRAD_TEST_PCH): a test program with no cases, never run.
