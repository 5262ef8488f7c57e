pub mod cli;
pub mod contract;
pub mod delta;
pub mod fanout;
pub mod fold;
pub mod pipeline;
pub mod seqset;
