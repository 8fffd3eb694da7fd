// SPDX-License-Identifier: Apache-2.0
// SPDX-FileCopyrightText: Copyright The Lance Authors

pub mod logical;
pub mod physical;

#[cfg(test)]
pub mod fuzz_tests;
